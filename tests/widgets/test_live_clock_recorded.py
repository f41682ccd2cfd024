"""The live pass's clock with a probe of this machine (issue 45, item 4): against a pass recorded here, against
simulated two-pipeline passes, and its parts (the fit, the schedule, the probe) by hand.

The recording is ``benchmarks/results/live_clock.json`` (``benchmarks/bench_live_clock.py``: a
Qwen2.5-7B-shaped slice measured by a real LivePass, first look and pass, each computed tensor's seconds and
the probe the pass read)."""

import heapq
import json
import math
import sys
from pathlib import Path

import pytest

from toolkit.widgets.live_clock import (
    Cost,
    PassStatus,
    ProbeRates,
    cost_of,
    fit_progress,
    makespan,
    progress_rows,
    seconds_left,
)
from toolkit.widgets.live_pace import Pace

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bench_live_clock import first_within, replay  # noqa: E402

QWEN7B = {"attn.k": (512, 3584), "attn.v": (512, 3584), "attn.q": (3584, 3584), "attn.o": (3584, 3584),
          "mlp.gate": (18944, 3584), "mlp.up": (18944, 3584), "mlp.down": (3584, 18944)}


@pytest.fixture(scope="module")
def recording():
    return json.loads((BENCHMARKS / "results" / "live_clock.json").read_text())["figures"]


def test_the_recording_is_a_mixed_shape_pass_that_starts_with_one_side(recording):
    tensors = recording["tensors"]
    sides = [Cost(t["entries"], t["spectral"]).side for t in tensors]
    assert len(set(sides)) >= 2 and len(tensors) == 7 * recording["layers"] > 0
    assert len(set(sides[:5])) == 1  # the first look: attn.k and attn.v, every layer
    assert all(t["seconds"] >= 0 for t in tensors) and recording["probe"]["pipelines"] >= 1


def test_the_clock_of_the_recorded_pass_is_within_1_5x_from_the_fifth_tensor_on(recording):
    ratios = replay(recording)
    assert all(1 / 1.5 <= r <= 1.5 for r in ratios[4:]), [round(r, 2) for r in ratios]
    assert first_within(ratios) <= 5


def test_without_the_probe_the_recorded_pass_is_misjudged(recording):
    """What the probe fixes: the two-rate fit on the same times is off by more than 1.5x after the fifth."""
    ratios = replay(recording, probe=False)
    assert first_within(ratios) > 5, [round(r, 2) for r in ratios]


def _simulated_pass(layers, pipelines, seconds):
    """``[(Cost, seconds since the report before)]`` of a pass over a 7B slice in the live order (smallest
    first, then by layer), each tensor claimed by the first free pipeline and taking ``seconds(cost)`` there."""
    units = sorted(((cost_of(shape), i) for shape in QWEN7B.values() for i in range(layers)),
                   key=lambda u: (u[0].entries, u[1]))
    free = [0.0] * pipelines
    done = []
    for cost, _ in units:
        t = heapq.heappop(free) + seconds(cost)
        heapq.heappush(free, t)
        done.append((t, cost))
    done.sort(key=lambda d: d[0])
    out, last = [], 0.0
    for t, cost in done:
        out.append((cost, t - last))
        last = t
    return out


@pytest.mark.parametrize("pipelines", [1, 2])
@pytest.mark.parametrize("probe_error", [1.0, 1.3, 1 / 1.3])
@pytest.mark.parametrize("setup", [0.0, 0.5])
def test_a_simulated_pass_is_within_1_5x_from_the_fifth_tensor_on(pipelines, probe_error, setup):
    """Reading 2 ns an entry, Gram 2.5e-11 s a unit, eigenvalues 8e-11 s per n^3 on each pipeline, a set-up
    before the first tensor, and a probe off by up to 30 %: the pipelines' paired reports and the end of
    the pass, where one pipeline has no work, included."""
    true = ProbeRates(2.5e-11, 8e-11, pipelines)
    measured = _simulated_pass(3, pipelines, lambda c: 2e-9 * c.entries + true.work(c))
    measured[0] = (measured[0][0], measured[0][1] + setup)
    probe = ProbeRates(true.gram * probe_error, true.eig * probe_error, pipelines)
    ratios = []
    for i in range(4, len(measured) - 1):
        left = tuple(c for c, _ in measured[i + 1:])
        truth = sum(s for _, s in measured[i + 1:])
        ratios.append(seconds_left(PassStatus(tuple(measured[:i + 1]), left, probe=probe)) / truth)
    assert all(1 / 1.5 <= r <= 1.5 for r in ratios), [round(r, 2) for r in ratios]


def test_the_fit_gives_back_setup_reading_and_the_probe_scale():
    probe = ProbeRates(1e-11, 5e-11, 1)
    costs = [cost_of(s) for s in ((512, 3584), (512, 3584), (3584, 3584), (18944, 3584))]
    measured, setup = [], 0.7
    for j, c in enumerate(costs):
        measured.append((c, (setup if j == 0 else 0.0) + 3e-9 * c.entries + 1.2 * probe.work(c)))
    rows = progress_rows(measured, (), probe)
    assert fit_progress(rows, scale_probe=True) == pytest.approx((0.7, 3e-9, 1.2), rel=1e-6)
    # one side only: the probe's scale is taken as 1, reading and set-up fitted to the rest
    k_rows = progress_rows([(costs[0], 0.7 + 3e-9 * costs[0].entries + probe.work(costs[0])),
                            (costs[1], 3e-9 * costs[1].entries + probe.work(costs[1]))], (), probe)
    assert fit_progress(k_rows, scale_probe=False) == pytest.approx((0.7, 3e-9, 1.0), rel=1e-6)


def test_rows_count_the_tensor_in_flight_half_done():
    probe = ProbeRates(1e-11, 0.0, 2)
    small, big = Cost(1.0, 1e10), Cost(2.0, 4e10)
    rows = progress_rows([(small, 1.0)], (big, big), probe)
    # done: small (0.1 s of spectra on one of two pipelines: 0.05 s of wall), in flight: one big, half done
    assert rows == [pytest.approx((1.0 + 0.5 * 2.0, 0.05 + 0.5 * 0.2, 1.0))]
    assert progress_rows([(small, 1.0)], (big,), probe) == [pytest.approx((1.0, 0.05, 1.0))]  # last: not split


def test_the_schedule_of_what_is_left():
    assert makespan([], float, 2) == 0.0
    assert makespan([4.0], float, 2) == 4.0  # the last tensor is one pipeline's whole work
    assert makespan([1.0, 1.0, 1.0], float, 1) == 3.0
    assert makespan([2.0, 4.0, 4.0], float, 2) == 5.0  # 2 in flight (1 left), then 4 and 4 on the two
    assert makespan([1.0, 2.0, 3.0, 4.0], float, 3) == 4.5


def test_the_probe_times_the_pass_route_once_per_precision(monkeypatch):
    from toolkit.widgets import live_probe

    monkeypatch.setattr(live_probe, "PROBE_GRAM", (64, 256))
    monkeypatch.setattr(live_probe, "PROBE_EIG", 96)
    live_probe.probe_rates.cache_clear()
    try:
        rates = live_probe.probe_rates("float32")
        assert live_probe.probe_rates("float32") is rates  # memoised: no second probe
        assert 1 <= rates.pipelines <= 2
        assert all(math.isfinite(r) and 0 < r < 1e-6 for r in (rates.gram, rates.eig))
    finally:
        live_probe.probe_rates.cache_clear()


def test_a_pace_with_a_probe_hands_it_to_the_clock():
    probe = ProbeRates(1e-11, 5e-11, 1)
    now = [0.0]
    k, q = cost_of((512, 3584)), cost_of((3584, 3584))
    pace = Pace({"k": k, "v": k, "q": q}, now=lambda: now[0], probe=probe)
    pace.begin()
    for i, name in enumerate(("k", "v")):
        now[0] += 3e-9 * k.entries + probe.work(k)
        pace.report(i + 1, 3, name)
    assert pace.status().probe is probe
    assert pace.eta() == pytest.approx(3e-9 * q.entries + probe.work(q), rel=1e-6)
