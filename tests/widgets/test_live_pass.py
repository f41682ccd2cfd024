"""The live pass without widgets (issue 36, item 4): :class:`toolkit.widgets.live_pass.LivePass` on a tiny
checkpoint (the thread, Stop and Resume, the cells offered to the view) and its
:class:`~toolkit.widgets.live_pace.Pace` on a fake clock (the count, the time spent, the time left).
No sleep races a thread here: a tensor read waits on an event the test sets."""

import subprocess
import sys
import time

import pytest

from _gate import TIMEOUT, Gate
from toolkit.testing import write_tiny_checkpoint
from toolkit.widgets.live_clock import Cost, PassStatus, cost_of, fit_rates, seconds_left
from toolkit.widgets.live_pace import Pace, time_left
from toolkit.widgets.live_pass import LivePass
from toolkit.widgets.live_plan import measured

METRICS = ["frobenius_norm"]


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("livepass") / "m", "llama", num_layers=3, seed=3)


@pytest.fixture
def events():
    return []


def _recorder(events):
    def on_event(kind, live):
        cells = measured(live.partial) if kind == "cells" else None
        events.append((kind, int(cells.sum()) if cells is not None else None))
    return on_event


# -- the pace, on a fake clock -------------------------------------------------------------------

def _sizes(n_small=2, n_large=26):
    sizes = {f"small.{i}": 100_000 for i in range(n_small)}
    sizes.update({f"large.{i}": 10_000_000 for i in range(n_large)})
    return sizes


def test_the_time_left_after_a_first_look_counts_the_large_matrices_to_come():
    """At 2 of 28 (the first look's two small matrices, computed, then found in the cache by the pass)
    the old line said "about 0 s left": the burst from the cache was the pace, and the small ones stood
    for the large ones. The pace is per unit of work, from computed tensors only."""
    clock = FakeClock()
    pace = Pace(_sizes(), now=clock)
    pace.begin()
    for name in ("small.0", "small.1"):  # the first look: 0.1 s each
        clock.tick(0.1)
        pace.report(1, 2, name)
    for i, name in enumerate(("small.0", "small.1")):  # the pass finds them in the cache at once
        clock.tick(0.001)
        pace.report(i + 1, 28, name)
    assert (pace.done, pace.total, pace.computed, pace.from_cache) == (2, 28, 2, 0)
    assert pace.eta() == pytest.approx(0.2 / 200_000 * 260_000_000)  # 260 s: 26 large matrices to come
    assert "about 4:20 left" in pace.line("small.1")


def test_the_time_left_after_a_resume_ignores_the_cells_from_the_cache():
    """After a Resume the cached tensors came back in a burst and counted as pace: the estimate ran 2x too
    low. Only computed tensors set the pace; a Stop leaves no time left; the summary is the whole run."""
    clock = FakeClock()
    sizes = {f"t.{i}": 1_000 for i in range(28)}
    pace = Pace(sizes, now=clock)
    pace.begin()
    for i in range(8):
        clock.tick(10)
        pace.report(i + 1, 28, f"t.{i}")
    assert pace.eta() == pytest.approx(200)
    pace.end()  # Stop
    assert pace.eta() is None and "left" not in pace.line()
    clock.tick(3600)  # an hour before the Resume: not measuring time
    pace.begin()
    for i in range(8):  # the burst from the cache
        clock.tick(0.01)
        pace.report(i + 1, 28, f"t.{i}")
    assert pace.eta() == pytest.approx(200)  # not 2x lower
    clock.tick(10)
    pace.report(9, 28, "t.8")
    assert pace.eta() == pytest.approx(190) and pace.computed == 9 and pace.from_cache == 0
    for i in range(9, 28):
        clock.tick(10)
        pace.report(i + 1, 28, f"t.{i}")
    pace.end()
    assert pace.eta() is None and pace.done == 28
    assert pace.elapsed() == pytest.approx(280.08)
    assert pace.segments == pytest.approx([80.0, 200.08])  # the hour between Stop and Resume is not counted
    assert pace.summary() == "28 tensors in 4:40 over 2 segments (1:20 + 3:20)"


def test_the_work_of_a_matrix_grows_as_its_singular_values_cost():
    k, down = cost_of((512, 3584)), cost_of((3584, 18944))  # a 7B model's attn.k and mlp.down
    assert 150 < down.spectral / k.spectral < 400  # measured about 200x on 2 cores; entries alone say 37x
    assert down.entries / k.entries == pytest.approx(37, rel=0.01)
    assert cost_of((8, 64, 32)) == Cost(8 * 64 * 32, 8 * 64 * 32 * 32, 8 * 32 ** 3)  # each expert's eigenvalues
    assert cost_of((10,)) == Cost(10, 10, 1) and cost_of((10,), spectra=False) == Cost(10, 0, 0)


def test_two_rates_fitted_by_hand():
    """Times 1e-8 s per entry plus 1e-11 s per spectral unit, on two shapes: both rates come back."""
    small, large = Cost(1e6, 5e8), Cost(1e7, 4e10)  # sides 500 and 4000
    a, b = fit_rates([(small, 0.015), (large, 0.5)])
    assert (a, b) == (pytest.approx(1e-8), pytest.approx(1e-11))
    assert fit_rates([(small, 0.015), (small, 0.015)]) == (0.0, pytest.approx(0.015 / 5e8))  # one side: spectral
    assert fit_rates([(Cost(1e6, 1e6), 1.0), (Cost(1e6, 1e9), 1.0)])[1] == 0.0  # a norms-only pass: b = 0
    assert seconds_left(PassStatus(((small, 0.015), (large, 0.5)), (large, large))) == pytest.approx(1.0)
    assert seconds_left(PassStatus(((small, 0.015),), (large,), running=False)) is None  # after a Stop
    assert seconds_left(PassStatus((), (large,))) is None  # no guess before the first tensor


def _qwen_slice(layers=3, spectra=True):
    """A Qwen2.5-7B-shaped slice in the live pass's order (smallest first, then by layer)."""
    shapes = {"attn.k": (512, 3584), "attn.v": (512, 3584), "attn.q": (3584, 3584), "attn.o": (3584, 3584),
              "mlp.gate": (18944, 3584), "mlp.up": (18944, 3584), "mlp.down": (3584, 18944)}
    units = [(f"{c}.{i}", cost_of(s, spectra=spectra)) for c, s in shapes.items() for i in range(layers)]
    return sorted(units, key=lambda u: (u[1].entries, u[0][-1]))


@pytest.mark.parametrize("overhead,per_entry,per_spectral", [(0.005, 3e-9, 1.2e-11), (0.01, 2e-8, 2e-12),
                                                             (0.005, 1e-8, 0.0)])
def test_the_clock_of_a_mixed_shape_pass_is_within_1_5x_once_two_shapes_are_measured(overhead, per_entry,
                                                                                    per_spectral):
    """Issue 45, item 4: a pass like a recorded one (a per-tensor overhead the model does not have, reading per
    entry, singular values per spectral unit; the last case a pass of norms only, whose costs have no spectral
    part) on a fake clock. From the first tensor of a second smaller side on (the 7th: the six attn.k / attn.v
    share one), the time left is within 1.5x of the truth. Before it a spectral pass without a probe cannot tell
    its two costs apart and assumes spectra: too high where reading dominates the small matrices (a pass of
    large matrices probes the machine first and is within 1.5x from the fifth tensor on:
    test_live_clock_recorded.py)."""
    units = _qwen_slice(spectra=per_spectral > 0)
    seconds = {name: overhead + per_entry * c.entries + per_spectral * c.spectral for name, c in units}
    clock = FakeClock()
    pace = Pace(dict(units), now=clock)
    pace.begin()
    ratios = []
    for i, (name, _) in enumerate(units[:-1]):
        clock.tick(seconds[name])
        pace.report(i + 1, len(units), name)
        truth = sum(seconds[n] for n, _ in units[i + 1:])
        ratios.append(pace.eta() / truth)
    assert all(1 / 1.5 <= r <= 1.5 for r in ratios[6:]), [round(r, 2) for r in ratios]
    if per_spectral == 0:  # norms only: one rate, right from the first tensor but for the overhead
        assert all(1 / 1.5 <= r <= 1.5 for r in ratios), [round(r, 2) for r in ratios]


def test_tensors_found_in_the_cache_by_a_new_run_are_said_so_and_no_zero_time_left():
    clock = FakeClock()
    pace = Pace({"a": 10, "b": 10, "c": 10}, now=clock)
    pace.begin()
    assert pace.eta() is None  # nothing computed yet: no guess
    pace.finished.add("a")  # measured by an earlier segment
    pace.begin()
    pace.report(1, 3, "a")
    assert pace.eta() is None and pace.from_cache == 1
    clock.tick(0.2)
    pace.report(2, 3, "b")
    assert time_left(pace.eta()) == "less than 1 s left"
    assert time_left(0.0) == "less than 1 s left" and time_left(65) == "about 1:05 left"
    assert "(1 from the cache)" in pace.summary()
    pace.end()
    assert pace.line() == "2 / 3 tensors · 0 s · 1 from the cache"  # the end: no time left, the cache said


# -- the pass, on a tiny checkpoint ----------------------------------------------------------------

def test_live_pass_imports_no_widgets():
    code = "import sys, toolkit.widgets.live_pass as m; assert 'ipywidgets' not in sys.modules, 'ipywidgets'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


def test_a_resume_never_offers_fewer_cells_than_the_view_shows(ckpt, cache, events, monkeypatch):
    """Resume re-ran the first look and showed its 2 cells in place of the 8 on screen for about 7 s
    (it looked like lost work), then the cached burst one cell at a time."""
    import toolkit.widgets.live_plan as live_plan

    monkeypatch.setattr(live_plan, "FIRST_LOOK_ENTRIES", 0)  # the tiny model gets a first look

    def on_event(kind, live):
        _recorder(events)(kind, live)
        if kind == "cells" and events[-1][1] >= 8 and live.look is None:
            live.stop()

    live = LivePass(ckpt, METRICS, refresh=0, on_event=on_event)
    live.start()
    assert live.state == "stopped" and ("stopping", None) in events
    kept = int(measured(live.ds).sum())
    assert 8 <= kept < 21
    events.clear()
    live.on_event = _recorder(events)
    live.start()  # Resume
    assert live.state == "done" and int(measured(live.ds).sum()) == 21
    kinds = [k for k, _ in events]
    assert "first_look" not in kinds  # the view holds cells: no first look again
    offered = [n for k, n in events if k == "cells"]
    assert offered and offered[0] >= kept and offered == sorted(offered)  # never fewer than shown
    assert live.pace.done == live.pace.computed == 21  # the whole run: the cells from the cache were its own


def test_stop_is_said_at_once_while_a_tensor_is_still_measured(ckpt, cache, events, monkeypatch):
    live = LivePass(ckpt, METRICS, refresh=0, on_event=_recorder(events))
    gate = Gate.on_progress(live, 4)  # the pass's thread busy after its 4th tensor, as with a large one
    live.start(background=True)
    try:
        assert gate.entered.wait(TIMEOUT)
        live.stop()
        assert events[-1] == ("stopping", None) and live.stopping and live.state == "running"  # at once
        assert not live.done and live.pace.eta() is not None or live.pace.computed == 0
    finally:
        gate.open()
    ds = live.wait(TIMEOUT)
    assert live.state == "stopped" and events[-1] == ("ended", None) and not live.stopping
    assert live.pace.eta() is None and "left" not in live.pace.line()
    assert int(measured(ds).sum()) == 4 == live.pace.done and "stopped" in ds.attrs  # the 4th one kept too


def test_when_done_runs_before_wait_returns_and_at_once_when_nothing_runs(ckpt, cache, monkeypatch):
    gate = Gate.on_read(monkeypatch, 2)
    live = LivePass(ckpt, METRICS)
    got = []
    live.start(background=True)
    try:
        assert gate.entered.wait(TIMEOUT)
        live.when_done(lambda lv: got.append(lv.state))
        assert got == []
    finally:
        gate.open()
    live.wait(TIMEOUT)
    assert got == ["done"]
    live.when_done(lambda lv: got.append("again"))
    assert got == ["done", "again"]


def test_a_new_selection_is_a_new_run_and_the_same_one_resumes(ckpt, cache):
    live = LivePass(ckpt, METRICS, stats_kws={"layers": [0]})
    live.start()
    assert live.state == "done" and live.pace.total == 7 and live.pace.summary().startswith("7 tensors")
    live.start(layers=[0, 1])
    assert live.pace.total == 14 and live.pace.from_cache == 7 and list(live.ds.layer.values) == [0, 1]
    assert live.partial is live.ds


def test_a_live_pass_fills_in_the_smallest_matrices_first_then_layers_by_number(tmp_path):
    """The cells came in file order (layers 0, 1, 10-11, 2 ...; each layer's large MLP matrices among the
    first): a pass that shows its cells as they come now measures by matrix size, then layer as a number."""
    import math

    import numpy as np

    import toolkit
    from toolkit.collect.plan import plan_pieces
    from toolkit.collect.weights import live_order
    from toolkit.sources import SourceRequest

    path = write_tiny_checkpoint(tmp_path / "m12", "llama", num_layers=12, seed=4)
    plan = plan_pieces(SourceRequest.of(str(path)), cache=False)
    files = [(t.pieces[0].layer, t.pieces[0].component) for t in plan.tensors]
    units = live_order(plan.tensors)
    keys = [(math.prod(t.record.shape), t.pieces[0].layer) for t in units]
    assert keys == sorted(keys) and len(units) == len(plan.tensors) == 12 * 7
    assert [layer for layer, c in ((t.pieces[0].layer, t.pieces[0].component) for t in units) if c == "attn.k"] \
        == list(range(12))
    assert files != [(t.pieces[0].layer, t.pieces[0].component) for t in units]

    order, seen = [], None

    def on_cells(partial):
        nonlocal seen
        got = measured(partial())
        new = got & ~seen if seen is not None else got
        seen = got
        comps = list(partial().component.values)
        order.extend(comps[j] for _, j in np.argwhere(new))

    toolkit.weight_stats(path, METRICS, progress=False, cache=False, on_cells=on_cells)
    # the readers run in parallel and finish out of turn, but the smallest (attn.k, attn.v) come first
    assert set(order[:8]) <= {"attn.k", "attn.v"}, order


def test_unmeasured_cells_of_a_running_pass_are_noted_as_not_measured_yet():
    from _stats_data import make_stats
    from toolkit.widgets import explore
    from toolkit.widgets.heatmap_spec import PENDING_NOTE

    ds = make_stats(4)
    ds["frobenius_norm"][2:] = float("nan")
    ex = explore(ds, "frobenius_norm")
    ex.pending = True  # what the live view sets while its pass runs
    ex.render()
    xlabel = ex.view.spec["panels"][0]["xlabel"]
    assert PENDING_NOTE in xlabel and "no value (NaN)" not in xlabel
    done = explore(ds, "frobenius_norm")
    assert "hatched: no value (NaN)" in done.view.spec["panels"][0]["xlabel"]


def test_a_path_and_its_text_are_one_source():
    """The form's Resume gives the text of the path the pass started with: taken for another model, the run
    started again and its final line lost the earlier segments (issue 45, item 4)."""
    from pathlib import Path

    from toolkit.widgets.live_plan import same_source

    assert same_source(Path("/m/model"), "/m/model") and not same_source("/m/model", "/m/other")
    assert same_source(None, None) and not same_source(None, "/m/model")


def test_cells_held_back_by_the_refresh_limit_are_shown_while_a_large_tensor_is_measured(ckpt, cache, events):
    """Issue 45: a first look's progress line ran 11 s ahead of its picture (6 tensors listed, 1 cell drawn):
    the cells that came within ``refresh`` of the last offer waited for the next tensor, a large one. The
    pass's clock stands still here, so every cell after the first is held back by the limit; the pass is
    held after its 4th tensor, and the 3 cells before it are offered by the trailing offer meanwhile."""
    live = LivePass(ckpt, METRICS, refresh=0.2, on_event=_recorder(events), now=lambda: 50.0)
    gate = Gate.on_progress(live, 4)  # held before the 4th tensor's cells are handed over
    live.start(background=True)
    try:
        assert gate.entered.wait(TIMEOUT)
        deadline = time.monotonic() + 10
        while ("cells", 3) not in events and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ("cells", 3) in events, events  # shown while the pass is still held
        assert [n for k, n in events if k == "cells"] == [1, 3]  # the first at once, then the held-back ones
    finally:
        gate.open()
    live.wait(TIMEOUT)
    assert live.state == "done" and int(measured(live.ds).sum()) == 21
    offered = [n for k, n in events if k == "cells"]
    assert offered == sorted(offered) and live._trailing is None


def test_a_probe_that_fails_leaves_the_pass_and_its_clock_to_the_times(ckpt, cache, monkeypatch):
    import toolkit.widgets.live_pass as live_pass
    import toolkit.widgets.live_plan as live_plan

    def broken(precision):
        raise RuntimeError("no BLAS here")

    monkeypatch.setattr(live_plan, "FIRST_LOOK_ENTRIES", 0)  # a large model: it would probe
    monkeypatch.setattr(live_pass, "probe_rates", broken)
    live = LivePass(ckpt, ["stable_rank"], refresh=0)
    with pytest.warns(RuntimeWarning, match="could not probe this machine"):
        live.start()
    assert live.state == "done" and live.pace.probe is None and int(measured(live.ds).sum()) == 21


def test_a_large_model_with_spectra_is_probed_once_and_its_clock_reads_the_probe(ckpt, cache, monkeypatch):
    import toolkit.widgets.live_pass as live_pass
    import toolkit.widgets.live_plan as live_plan
    from toolkit.widgets.live_clock import ProbeRates

    calls = []
    monkeypatch.setattr(live_plan, "FIRST_LOOK_ENTRIES", 0)
    monkeypatch.setattr(live_pass, "probe_rates", lambda p: calls.append(p) or ProbeRates(1e-11, 5e-11, 2))
    live = LivePass(ckpt, ["stable_rank"], refresh=0, stats_kws={"precision": "float32"})
    live.start()
    assert calls == ["float32"] and live.pace.probe == ProbeRates(1e-11, 5e-11, 2)
    norms = LivePass(ckpt, METRICS, refresh=0)  # norms only: no singular values, no probe
    norms.start()
    assert calls == ["float32"] and norms.pace.probe is None
