"""toolkit.watch on hostile runs: a resumed store, a matrix that changes shape or is not floating point, step
numbers a store cannot hold, a step after close. Each was a wrong number, a lost record or a hang."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import toolkit
from toolkit.errors import InvalidOptionError, MonitorClosedError, OutputPathError
from toolkit.lab.vit import ViT

CELL = dict(layer=0, component="attn.qkv")
NAME = "blocks.0.attn.qkv.weight"


def _vit(seed=0, depth=2):
    torch.manual_seed(seed)
    return ViT("softmax", dim=16, depth=depth, heads=2)


def _nudge(model, step):
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(step)))


def _resumed_run(store, *, drop_start=False):
    """Steps 0-4 watched every 2, closed, then resumed for steps 5-8; the qkv matrix of block 0 at each step."""
    model = _vit()
    seen = {}
    first = toolkit.watch(model, every=2, store=store)
    for step in range(9):
        if step == 5:
            first.close()
            if drop_start:
                (store / "start.safetensors").unlink()
            again = toolkit.watch(model, every=2, store=store)
        _nudge(model, step)
        (first if step < 5 else again).step(step)
        seen[step] = model.blocks[0].attn.qkv.weight.detach().double().clone()
    again.close()
    return model, seen, toolkit.load(store)


def test_a_resumed_run_measures_its_updates_since_the_first_record(tmp_path):
    # the resumed session's first record used to be taken as the run's start: relative_change_since_start at
    # step 8 was the change since step 6 (0.44 where the change since step 0 was 1.40); the first record's
    # matrices are kept in the store, so the resumed run measures against step 0 itself
    model, seen, ds = _resumed_run(tmp_path / "run.watch")
    assert list(ds.step.values) == [0, 2, 4, 6, 8]
    for step in (2, 4, 6, 8):
        want = float(torch.linalg.norm(seen[step] - seen[0]) / torch.linalg.norm(seen[0]))
        assert float(ds.relative_change_since_start.sel(step=step, **CELL)) == pytest.approx(want, rel=1e-9)
    assert math.isnan(float(ds.relative_change_since_previous.sel(step=6, **CELL)))  # step 4: earlier session
    assert "step 4" in str(ds.nan_reason.sel(step=6, **CELL).values)
    want = float(torch.linalg.norm(seen[8] - seen[6]) / torch.linalg.norm(seen[6]))
    assert float(ds.relative_change_since_previous.sel(step=8, **CELL)) == pytest.approx(want, rel=1e-9)
    # another model, or another cadence, is not mixed into the same store
    with pytest.raises(OutputPathError, match="model"):
        toolkit.watch(torch.nn.ModuleDict({"blocks": torch.nn.ModuleList([torch.nn.Sequential(
            torch.nn.Linear(4, 4))])}), every=2, store=tmp_path / "run.watch")
    with pytest.raises(OutputPathError, match="every"):
        toolkit.watch(model, every=3, store=tmp_path / "run.watch")


def test_a_resumed_store_without_the_first_matrices_says_so(tmp_path):
    _, _, ds = _resumed_run(tmp_path / "run.watch", drop_start=True)
    for step in (6, 8):
        assert math.isnan(float(ds.relative_change_since_start.sel(step=step, **CELL)))
        assert "does not hold its matrices" in str(ds.nan_reason.sel(step=step, **CELL).values)
    assert float(ds.relative_change_since_start.sel(step=4, **CELL)) > 0


KILLED = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    import toolkit
    from tests.monitor.test_watch_hostile import _nudge, _vit
    store = Path(sys.argv[1])
    model = _vit()
    monitor = toolkit.watch(model, every=2, store=store)
    for step in range(4):
        _nudge(model, step)
        monitor.step(step)
    deadline = time.monotonic() + 120
    while not (store / "start.safetensors").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    while len(list(store.glob("step-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)  # no wait(), no close(): a crash, an OOM kill, a preempted node
""")


def test_a_killed_run_keeps_the_first_matrices_and_resumes_since_step_0(tmp_path):
    # the first record's matrices used to be written at wait() / close() only: a run killed before (the usual
    # way a run ends early) resumed with every *_since_start NaN. They are written beside the training once the
    # first record is measured, so a killed run keeps them
    store = tmp_path / "run.watch"
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(store)], env=env, cwd=root, timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert (store / "start.safetensors").is_file()
    model = _vit()
    seen = {}
    for step in range(4):  # the killed run's weights, replayed
        _nudge(model, step)
        seen[step] = model.blocks[0].attn.qkv.weight.detach().double().clone()
    again = toolkit.watch(model, every=2, store=store)
    for step in range(4, 7):
        _nudge(model, step)
        again.step(step)
        seen[step] = model.blocks[0].attn.qkv.weight.detach().double().clone()
    again.close()
    ds = toolkit.load(store)
    assert list(ds.step.values) == [0, 2, 4, 6]
    for step in (2, 4, 6):
        want = float(torch.linalg.norm(seen[step] - seen[0]) / torch.linalg.norm(seen[0]))
        assert float(ds.relative_change_since_start.sel(step=step, **CELL)) == pytest.approx(want, rel=1e-9)


def test_an_unwritable_first_matrices_file_is_raised_by_wait(tmp_path, monkeypatch):
    from toolkit.monitor.store import RecordStore

    def refuse(self, step, matrices):
        raise OutputPathError(str(self.path), "no space left on device; free disk space or give another store")

    monkeypatch.setattr(RecordStore, "save_start", refuse)
    monitor = toolkit.watch(_vit(), every=2, store=tmp_path / "run.watch")
    monitor.step(0)
    with pytest.raises(OutputPathError, match="no space left"):
        monitor.wait()
    monitor.wait()  # said once: the records go on
    monitor.close()


def test_a_matrix_that_changes_shape_or_is_not_floating_point_is_nan_alone():
    model = _vit()
    block = model.blocks[1]
    block.extra = torch.nn.Module()
    block.extra.weight = torch.nn.Parameter(torch.ones(8, 8, dtype=torch.int8), requires_grad=False)
    monitor = toolkit.watch(model, every=1)
    monitor.step(0)
    _nudge(model, 1)
    old = model.blocks[0].attn.qkv.weight.detach().clone()
    model.blocks[0].attn.qkv.weight = torch.nn.Parameter(torch.randn(24, 16))  # 48 x 16 before
    monitor.step(1)
    monitor.wait()
    assert monitor.failed == []
    ds = monitor.dataset
    assert old.shape == (48, 16)
    assert math.isnan(float(ds.relative_change_since_start.sel(step=1, **CELL)))
    assert "changed shape" in str(ds.nan_reason.sel(step=1, **CELL).values)
    w = model.blocks[0].attn.qkv.weight.detach().double()
    assert float(ds.frobenius_norm.sel(step=1, **CELL)) == pytest.approx(float(torch.linalg.norm(w)), rel=1e-6)
    other = dict(layer=1, component="attn.qkv")
    assert float(ds.relative_change_since_start.sel(step=1, **other)) > 0
    ints = dict(layer=1, component="extra")
    assert float(ds.frobenius_norm.sel(step=1, **ints)) == pytest.approx(8.0)
    assert math.isnan(float(ds.relative_change_since_previous.sel(step=1, **ints)))
    assert "not a floating-point matrix" in str(ds.nan_reason.sel(step=1, **ints).values)


@pytest.mark.parametrize("bad", [2.9, 6.0, True, "8", -5, 2 ** 63, float("nan"), None.__class__])
def test_a_step_the_store_cannot_hold_is_a_typed_error(bad):
    monitor = toolkit.watch(_vit(), every=1)
    with pytest.raises(InvalidOptionError, match="global_step"):
        monitor.step(bad)
    assert monitor.step(np.int64(3)) and monitor.step(4)
    with pytest.raises(InvalidOptionError, match="after the last step recorded"):
        monitor.step(2)
    monitor.close()
    assert list(monitor.dataset.step.values) == [3, 4]


def test_a_step_after_close_is_a_typed_error_not_a_hang():
    monitor = toolkit.watch(_vit(), every=1)
    monitor.step(0)
    monitor.close()
    with pytest.raises(MonitorClosedError, match="toolkit.watch"):
        monitor.step(1)
    assert monitor.wait() is monitor  # nothing queued: returns at once
    assert list(monitor.dataset.step.values) == [0]


def test_a_tied_matrix_is_measured_in_each_cell_it_fills():
    # named_parameters() lists a tied parameter once: its second cell was NaN with an empty reason
    model = _vit()
    model.blocks[1].attn.qkv.weight = model.blocks[0].attn.qkv.weight
    monitor = toolkit.watch(model, every=1)
    monitor.step(0)
    monitor.close()
    ds = monitor.dataset
    want = float(torch.linalg.norm(model.blocks[0].attn.qkv.weight.detach().double()))
    for layer in (0, 1):
        assert float(ds.frobenius_norm.sel(step=0, layer=layer, component="attn.qkv")) == pytest.approx(want, rel=1e-6)


def test_a_deleted_store_fails_its_records_and_a_complex_matrix_is_nan(tmp_path):
    import shutil

    model = _vit()
    model.blocks[0].extra = torch.nn.Module()
    model.blocks[0].extra.weight = torch.nn.Parameter(torch.full((8, 8), 1 + 1j, dtype=torch.complex64),
                                                      requires_grad=False)
    store = tmp_path / "run.watch"
    monitor = toolkit.watch(model, every=1, store=store)
    monitor.step(0)
    monitor.wait()
    cell = toolkit.load(store).sel(step=0, layer=0, component="extra")
    assert math.isnan(float(cell.frobenius_norm)) and "complex matrix" in str(cell.nan_reason.values)
    shutil.rmtree(store)
    monitor.step(1)
    monitor.close()
    assert [s for s, _ in monitor.failed] == [1]
    assert "watch.json is gone" in monitor.failed[0][1]
    assert not store.exists()  # no store-less folder made again
