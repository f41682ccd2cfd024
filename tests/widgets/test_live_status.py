"""toolkit.widgets.live_status: the live pass as an enum of states and one locked status object, the clock a
function of its snapshot (issue 45, item 4), on a fake clock."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from toolkit.widgets.live_clock import Cost
from toolkit.widgets.live_pace import Pace
from toolkit.widgets.live_status import LiveStatus, PassState

K = Cost(1e6, 5e8)  # one shape: the clock's rate is all spectral, 0.5 s a tensor below


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_states_are_the_old_strings():
    assert [s.value for s in PassState] == ["idle", "running", "done", "stopped", "failed"]
    assert PassState.STOPPED == "stopped" and f"{PassState.FAILED}" == "failed" and str(PassState.DONE) == "done"
    assert PassState("running") is PassState.RUNNING
    assert [s.ended for s in PassState] == [False, False, True, True, True]


def test_the_clock_reads_the_snapshot_and_stops_with_the_pass():
    clock = FakeClock()
    status = LiveStatus(Pace({f"k{i}": K for i in range(4)}, now=clock))
    status.update(state="running")
    status.pace.begin()
    first = status.snapshot()
    assert (first.state, first.done, first.seconds_left, first.elapsed) == (PassState.RUNNING, 0, None, 0.0)
    for i in range(2):  # two tensors of 0.5 s each
        clock.t += 0.5
        status.report(i + 1, 4, f"k{i}")
    snap = status.snapshot()
    assert (snap.done, snap.total, snap.name, snap.elapsed) == (2, 4, "k1", 1.0)
    assert snap.seconds_left == pytest.approx(1.0)  # two tensors left at 0.5 s each
    assert snap.clock.left == (K, K) and [t for _, t in snap.clock.measured] == [0.5, 0.5]
    clock.t += 3.0  # the snapshot is frozen: what it said stays
    assert snap.elapsed == 1.0 and status.snapshot().elapsed == 4.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.state = PassState.DONE
    status.update(stopping=True)
    assert status.snapshot().stopping
    status.pace.end()
    status.update(state=PassState.STOPPED)
    stopped = status.snapshot()
    assert (stopped.state, stopped.stopping, stopped.seconds_left, stopped.elapsed) == (PassState.STOPPED, False,
                                                                                          None, 4.0)
    clock.t += 10.0
    assert status.snapshot().elapsed == 4.0  # a stopped pass's time no longer runs


def test_update_refuses_what_is_no_field_and_no_state():
    status = LiveStatus()
    with pytest.raises(TypeError, match="no field \\['pace'\\]"):
        status.update(pace=None)
    with pytest.raises(ValueError):
        status.update(state="paused")
    status.update(look=["attn.k", "attn.v"], error=None)
    assert status.snapshot().look == ("attn.k", "attn.v")


def test_a_snapshot_taken_while_the_pass_reports_has_its_count_and_name_together():
    status = LiveStatus(Pace(now=FakeClock()))
    status.update(state="running")
    n, seen = 3000, []

    def run():
        for i in range(n):
            status.report(i + 1, n, f"t{i}")

    worker = threading.Thread(target=run)
    worker.start()
    while worker.is_alive():
        seen.append(status.snapshot())
    worker.join()
    seen.append(status.snapshot())
    assert all(s.name == (f"t{s.done - 1}" if s.done else "") for s in seen)
    assert seen[-1].done == n and all(a.done <= b.done for a, b in zip(seen, seen[1:], strict=False))


def test_a_live_pass_hands_its_state_as_the_enum_and_a_failure_in_one_snapshot():
    from toolkit.widgets.live_pass import LivePass

    live = LivePass()
    assert live.state is PassState.IDLE and live.state == "idle"
    err = ValueError("layers: 'x' is no selection")
    live.fail(err)
    snap = live.snapshot()
    assert (snap.state, snap.error, snap.stopping) == (PassState.FAILED, err, False) and live.error is err
