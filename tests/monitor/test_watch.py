"""toolkit.watch: the values of each record against independent computations, the store, the worker's policy."""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import pytest
import torch

import toolkit
from toolkit.errors import InvalidOptionError, OutputPathError, ResultsNotFoundError, SelectionError, WatchFellBehind
from toolkit.lab.vit import ViT
from toolkit.monitor.worker import Worker


def _vit(seed=0, depth=3):
    torch.manual_seed(seed)
    return ViT("softmax", dim=16, depth=depth, heads=2)


def _train(model, monitor, steps, *, lr=0.05, grads=False, seed=1):
    """A plain loop; returns the CPU copies of every parameter at each step the monitor recorded."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    seen = {}
    for step in range(steps):
        x, y = torch.randn(4, 1, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if grads and monitor.due(step):
            monitor.capture_gradients()
            seen[("grad", step)] = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
        if monitor.step(step):
            seen[step] = {n: p.detach().clone() for n, p in model.named_parameters()}
    monitor.wait()
    return seen


def test_unregistered_model_records_by_module_path_with_values_checked(tmp_path):
    model = _vit()
    monitor = toolkit.watch(model, ["frobenius_norm", "stable_rank"], every=3, spectral_every=6, gradients=True)
    seen = _train(model, monitor, 10, grads=True)
    ds = monitor.dataset
    assert list(ds.step.values) == [0, 3, 6, 9]
    assert list(ds.component.values) == ["attn.proj", "attn.qkv", "mlp.0", "mlp.2"]
    assert ds.sizes["layer"] == 3 and ds.attrs["model_type"] == "module paths"
    name = "blocks.1.attn.qkv.weight"
    cell = dict(layer=1, component="attn.qkv")
    for step in (0, 3, 6, 9):
        w = seen[step][name].double().numpy()
        assert float(ds.frobenius_norm.sel(step=step, **cell)) == pytest.approx(np.linalg.norm(w), rel=1e-6)
        s = np.linalg.svd(w, compute_uv=False)
        sr = ds.stable_rank.sel(step=step, **cell)
        if step % 6 == 0:
            assert float(sr) == pytest.approx((s ** 2).sum() / s[0] ** 2, rel=1e-6)
        else:
            reason = str(ds.nan_reason.sel(step=step, **cell).values)
            assert math.isnan(float(sr)) and "spectral metrics every 6 steps" in reason
        g = seen[("grad", step)][name].double().numpy()
        assert float(ds.gradient_norm.sel(step=step, **cell)) == pytest.approx(np.linalg.norm(g), rel=1e-6)
    w0, w6, w9 = (seen[s][name] for s in (0, 6, 9))
    assert float(ds.relative_change_since_start.sel(step=9, **cell)) == pytest.approx(
        float(torch.linalg.norm((w9 - w0).double()) / torch.linalg.norm(w0.double())), rel=1e-6)
    assert float(ds.update_density_since_previous.sel(step=9, **cell)) == pytest.approx(
        float((w9 != w6).double().mean()), abs=1e-12)
    assert math.isnan(float(ds.relative_change_since_start.sel(step=0, **cell)))
    assert "no earlier record" in str(ds.nan_reason.sel(step=0, **cell).values)


@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_registered_family_record_equals_weight_stats_of_the_saved_model(tmp_path, family):
    from toolkit.testing import tiny_model
    from toolkit.testing.moe import tiny_moe_model

    model = tiny_model("llama", num_layers=2) if family == "llama" else tiny_moe_model("mixtral", num_layers=2)
    monitor = toolkit.watch(model, ["frobenius_norm", "stable_rank"], every=1)
    monitor.step(0)
    ds = monitor.wait().dataset.isel(step=0)
    model.save_pretrained(tmp_path)
    ref = toolkit.weight_stats(tmp_path, ["frobenius_norm", "stable_rank"], progress=False, cache=False)
    assert list(ds.component.values) == list(ref.component.values)
    for var in ("frobenius_norm", "stable_rank"):
        np.testing.assert_array_equal(ds[var].values, ref[var].values)
    if family == "mixtral":
        np.testing.assert_array_equal(ds.frobenius_norm_per_expert.values, ref.frobenius_norm_per_expert.values)


def test_store_survives_a_killed_writer_resumes_and_reads_while_running(tmp_path):
    store = tmp_path / "run.watch"
    model = _vit(depth=2)
    monitor = toolkit.watch(model, every=2, store=store)
    _train(model, monitor, 5)
    assert list(toolkit.load(store).step.values) == [0, 2, 4]
    (store / "step-000000000006.nc.tmp-killed").write_bytes(b"half a record")  # a writer killed mid-record
    resumed = toolkit.watch(model, every=2, store=store)
    assert not resumed.step(2) and not resumed.due(4)  # recorded already
    assert resumed.step(6)
    resumed.wait()
    ds = toolkit.load(store)
    assert list(ds.step.values) == [0, 2, 4, 6] and ds.attrs["watch_steps"] == 4
    with pytest.raises(OutputPathError, match="other|metrics"):
        toolkit.watch(model, ["rms"], every=2, store=store)


def test_store_that_cannot_be_written_fails_at_watch_not_later(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(OutputPathError, match="not a folder"):
        toolkit.watch(_vit(depth=1), store=blocker)
    with pytest.raises(OutputPathError, match="cannot be written"):
        toolkit.watch(_vit(depth=1), store=blocker / "inside")
    other = tmp_path / "someone_elses"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputPathError, match="not a watch store"):
        toolkit.watch(_vit(depth=1), store=other)
    with pytest.raises(OutputPathError, match="NUL"):
        toolkit.watch(_vit(depth=1), store=str(tmp_path / "a\x00b"))
    with pytest.raises(ResultsNotFoundError):
        toolkit.watch(_vit(depth=1)).dataset  # noqa: B018 - no record yet


def test_a_matrix_that_fails_is_nan_with_its_reason_and_the_run_goes_on():
    model = _vit(depth=2)
    with torch.no_grad():
        model.blocks[0].attn.proj.weight[0, 0] = float("nan")
    monitor = toolkit.watch(model, ["frobenius_norm", "stable_rank"], every=1)
    assert monitor.step(0) and monitor.step(1)  # both measured on the worker
    ds = monitor.wait().dataset
    bad = dict(layer=0, component="attn.proj")
    assert np.isnan(ds.stable_rank.sel(**bad)).all()
    assert "NaN/Inf" in str(ds.nan_reason.sel(step=0, **bad).values)
    assert np.isfinite(ds.stable_rank.sel(layer=1, component="attn.proj")).all()


def test_worker_behind_skips_says_so_and_never_blocks():
    started, release = threading.Event(), threading.Event()
    handled = []

    class Snap:
        def __init__(self, step):
            self.step = step

    def handle(snap):
        started.set()
        release.wait(5)
        handled.append(snap.step)

    worker = Worker(handle, capacity=1)
    assert worker.submit(Snap(0))
    assert started.wait(5)  # the thread holds step 0
    assert worker.submit(Snap(1))  # waits in the queue
    with pytest.warns(WatchFellBehind, match="step 2 was skipped"):
        assert not worker.submit(Snap(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per run
        assert not worker.submit(Snap(3))
    release.set()
    worker.close()
    assert handled == [0, 1] and worker.skipped == [2, 3]


def test_a_reserved_snapshot_is_never_skipped_and_holds_one_place_more_until_measured():
    started, release = threading.Event(), threading.Event()
    handled = []

    class Snap:
        def __init__(self, step):
            self.step = step

    def handle(snap):
        started.set()
        release.wait(5)
        handled.append(snap.step)

    worker = Worker(handle, capacity=2)
    assert worker.submit(Snap(0), reserved=True)
    assert started.wait(5)  # the thread measures the reserved one
    assert worker.submit(Snap(1)) and worker.submit(Snap(2)) and worker.submit(Snap(3))  # 2 places + its own
    with pytest.warns(WatchFellBehind, match="step 4 was skipped"):
        assert not worker.submit(Snap(4))
    release.set()
    worker.wait()
    assert handled == [0, 1, 2, 3] and worker.skipped == [4]
    release.clear()
    started.clear()
    assert worker.submit(Snap(5))
    assert started.wait(5)
    assert worker.submit(Snap(6)) and worker.submit(Snap(7))
    assert not worker.submit(Snap(8))  # measured: its place is gone
    assert worker.submit(Snap(9), reserved=True)  # reserved: queued even now
    release.set()
    worker.close()
    assert handled == [0, 1, 2, 3, 5, 6, 7, 9] and worker.skipped == [4, 8]


def test_the_first_record_is_measured_on_the_worker_while_training_goes_on(monkeypatch):
    from toolkit.monitor import monitor as monitor_module

    measure, release, threads = monitor_module.measure_snapshot, threading.Event(), []

    def held(snap, *args, **kwargs):
        threads.append(threading.current_thread().name)
        assert release.wait(10)
        return measure(snap, *args, **kwargs)

    monkeypatch.setattr(monitor_module, "measure_snapshot", held)
    model = _vit(depth=1)
    monitor = toolkit.watch(model, ["frobenius_norm"], every=1)
    expected = float(torch.linalg.norm(model.blocks[0].attn.qkv.weight.detach().double()))
    assert monitor.step(0)  # returns while the record waits on the worker
    with pytest.raises(ResultsNotFoundError, match="background worker"):
        monitor.dataset  # noqa: B018 - not measured yet
    release.set()
    ds = monitor.wait().dataset
    assert threads == ["toolkit-watch"]
    assert float(ds.frobenius_norm.sel(step=0, layer=0, component="attn.qkv")) == pytest.approx(expected, rel=1e-6)


def test_a_first_record_that_cannot_be_written_stops_the_run_at_the_next_call(tmp_path):
    model = _vit(depth=1)
    monitor = toolkit.watch(model, ["frobenius_norm"], every=1, store=tmp_path / "store")
    write = monitor.store.append

    def full_disk(record):
        if int(record["step"].values[0]) == 0:
            raise OutputPathError(str(tmp_path / "store"), "the record of step 0 cannot be written (No space "
                                  "left on device); free disk space or give another store")
        return write(record)

    monitor.store.append = full_disk
    assert monitor.step(0)
    with pytest.raises(OutputPathError, match="No space left"):
        monitor.wait()
    with pytest.raises(OutputPathError, match="No space left"):
        monitor.step(1)
    assert monitor.failed and monitor.failed[0][0] == 0


def test_a_failed_record_is_listed_and_the_next_records_go_on():
    def handle(snap):
        if snap.step == 1:
            raise RuntimeError("boom")

    class Snap:
        def __init__(self, step):
            self.step = step

    worker = Worker(handle, capacity=4)
    for s in range(3):
        worker.submit(Snap(s))
    worker.close()
    assert worker.failed == [(1, "RuntimeError: boom")] and worker.done == 3


@pytest.mark.parametrize("kwargs, option", [
    (dict(every=0), "every"), (dict(every=1.5), "every"), (dict(spectral_every=0), "spectral_every"),
    (dict(queue=0), "queue"), (dict(gradients="yes"), "gradients"), (dict(metrics=[]), "metrics"),
    (dict(store=3), "store"),
])
def test_bad_options_are_typed_before_any_work(kwargs, option):
    with pytest.raises(InvalidOptionError, match=f"toolkit.watch: {option}="):
        toolkit.watch(_vit(depth=1), **kwargs)


def test_not_a_module_and_a_selection_it_does_not_have():
    with pytest.raises(InvalidOptionError, match="torch.nn.Module"):
        toolkit.watch("model")
    with pytest.raises(SelectionError):
        toolkit.watch(_vit(depth=2), layers=5)
    monitor = toolkit.watch(_vit(depth=3), layers=-1, components="attn.*", every=1)
    assert {w.key for w in monitor.plan.matrices} == {(2, "attn.qkv"), (2, "attn.proj")}


def test_lora_model_is_watched_as_the_merged_matrix(tmp_path):
    from peft import LoraConfig, get_peft_model

    from toolkit.testing import tiny_model

    torch.manual_seed(0)
    model = get_peft_model(tiny_model("llama", num_layers=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # peft starts B at zero: give the adapter an update to see
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    monitor = toolkit.watch(model, ["frobenius_norm"], every=1)
    assert monitor.plan.family == "llama" and len(monitor.plan.matrices) == 14
    monitor.step(0)
    ds = monitor.wait().dataset.isel(step=0)
    merged = model.merge_and_unload()  # peft's own merge: the independent route
    merged.save_pretrained(tmp_path)
    ref = toolkit.weight_stats(tmp_path, ["frobenius_norm"], progress=False, cache=False)
    np.testing.assert_allclose(ds.frobenius_norm.values, ref.frobenius_norm.values, rtol=1e-6)
    base = merged.model.layers[0].self_attn.k_proj.weight  # not adapted: the plain weight
    assert float(ds.frobenius_norm.sel(layer=0, component="attn.k")) == pytest.approx(
        float(torch.linalg.norm(base.double())), rel=1e-6)


def test_worker_measures_with_one_thread_and_leaves_the_training_its_threads():
    import os

    seen = []

    class Snap:
        step = 0

    def handle(snap):
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    worker = Worker(handle, capacity=2)
    worker.submit(Snap())
    worker.close()
    assert seen == [1] and torch.get_num_threads() == before
    later = []
    t = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert later == [before]  # a thread started after a record still gets the process's count
    if hasattr(os, "getpriority"):
        assert os.getpriority(os.PRIO_PROCESS, 0) >= 0  # only the worker thread was lowered


def test_snapshot_buffers_are_reused_and_every_record_stays_right():
    """A record's copies go into the buffers of a record the worker no longer reads (neither the first nor the
    previous): the values of every record still equal independent computations on the weights of its step."""
    model = _vit(depth=2)
    monitor = toolkit.watch(model, ["frobenius_norm"], every=1)
    gen = torch.Generator().manual_seed(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    name, key, cell = "blocks.1.mlp.0.weight", (1, "mlp.0"), dict(layer=1, component="mlp.0")
    seen, pointers = [], []
    for step in range(6):
        x, y = torch.randn(4, 1, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        assert monitor.step(step)
        monitor.wait()
        seen.append(dict(model.named_parameters())[name].detach().clone())
        pointers.append(monitor._previous.matrices[key].data_ptr())
    assert len(set(pointers)) == 3 and pointers[3] == pointers[1] and pointers[5] == pointers[1]
    assert monitor._start.matrices[key].data_ptr() == pointers[0]
    ds = monitor.dataset
    for step in range(1, 6):
        w, w0, prev = seen[step].double(), seen[0].double(), seen[step - 1].double()
        assert float(ds.frobenius_norm.sel(step=step, **cell)) == pytest.approx(float(torch.linalg.norm(w)), rel=1e-12)
        assert float(ds.relative_change_since_start.sel(step=step, **cell)) == pytest.approx(
            float(torch.linalg.norm(w - w0) / torch.linalg.norm(w0)), rel=1e-12)
        assert float(ds.relative_change_since_previous.sel(step=step, **cell)) == pytest.approx(
            float(torch.linalg.norm(w - prev) / torch.linalg.norm(prev)), rel=1e-12)
        assert float(ds.update_density_since_previous.sel(step=step, **cell)) == float(
            (seen[step] != seen[step - 1]).double().mean())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_records_pair_sums_from_its_moments_equal_the_pairs_own(dtype):
    """pair_sums_for (the records' own sums of squares, the difference's sums in one pass, the inner product by
    polarisation) gives each pair's pair_sums; bfloat16 takes pair_sums_against."""
    from toolkit.metrics.pair_sums import pair_sums
    from toolkit.metrics.registry import get_metric
    from toolkit.monitor.record import Snapshot, measure_snapshot, pair_sums_for

    g = torch.Generator().manual_seed(5)
    w0 = (0.02 * torch.randn(70, 90, generator=g)).to(dtype)
    w1 = (w0.double() + 1e-3 * torch.randn(70, 90, generator=g, dtype=torch.float64)).to(dtype)
    w2 = w1.clone()
    w2[:10] += 1  # a large change of a few rows
    snaps = [Snapshot(s, {(0, "attn.q"): w}) for s, w in enumerate((w0, w1, w2))]
    metrics = [get_metric("frobenius_norm")]
    for i, snap in enumerate(snaps):
        measure_snapshot(snap, metrics, start=snaps[0] if i else None, previous=snaps[i - 1] if i else None,
                         spectral_every=1)
    got = pair_sums_for((0, "attn.q"), snaps[2], [snaps[0], snaps[1]])
    for base, s in zip((w0, w1), got, strict=True):
        want = pair_sums(base, w2)
        for f in ("sumsq_base", "sumsq_target", "sumsq_delta"):
            assert getattr(s, f) == pytest.approx(getattr(want, f), rel=1e-14), f
        assert s.dot == pytest.approx(want.dot, rel=1e-12)
        assert (s.unchanged, s.n) == (want.unchanged, want.n)


def test_what_watching_cost_is_counted_on_each_thread():
    """Worker.cpu_s is the worker thread's CPU time in its handler (a sleep costs none, a busy loop all of its
    time); Monitor.training_thread_s the training thread's wall time in recording steps only."""
    import time

    def handle(snap):
        if snap.step == 1:
            time.sleep(0.5)
        else:
            end = time.thread_time() + 0.15
            while time.thread_time() < end:
                pass

    class Snap:
        def __init__(self, step):
            self.step = step

    worker = Worker(handle, capacity=2)
    worker.submit(Snap(1))
    worker.submit(Snap(2))
    worker.close()
    assert 0.15 <= worker.cpu_s < 0.4  # the 0.5 s sleep is not counted
    monitor = toolkit.watch(_vit(depth=1), every=2)
    assert not monitor.step(1) and monitor.training_thread_s == 0.0 and monitor.worker_cpu_s == 0.0
    assert monitor.step(2) and monitor.training_thread_s > 0.0
    assert "training thread" in monitor.status() and "worker" in monitor.status()
