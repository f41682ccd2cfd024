"""weight_stats / compare / compare_series on a Dask LocalCluster (2 worker processes).

The Dataset from the cluster equals the serial one exactly; a killed worker
loses nothing; a checkpoint a worker cannot read is named, with the worker;
a re-run submits only what the shared cache lacks; no tensor is read on the driver.
"""

from __future__ import annotations

import math
import os
import signal

import distributed
import pytest
import torch
import xarray as xr

import toolkit
from toolkit.cli import main
from toolkit.collect.cache import open_cache
from toolkit.collect.execute.remote import SourceSpec, WorkerTaskError, measure_task
from toolkit.collect.measure.weights import WeightMeasurement
from toolkit.collect.plan import plan_pieces
from toolkit.sources.base import TensorRecord
from toolkit.testing import write_tiny_checkpoint

WEIGHT_METRICS = ["frobenius_norm", "spectral_norm", "stable_rank", "effective_rank", "alpha"]


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def llama28(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("llama28") / "llama28", "llama", num_layers=28)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A training run: 4 bf16 checkpoints of a 3-layer phi3 (fused QKV and gate/up), two seeds."""
    root = tmp_path_factory.mktemp("run")
    return [write_tiny_checkpoint(root / f"step-{s:03d}", "phi3", num_layers=3, dtype=torch.bfloat16, seed=s // 10)
            for s in (0, 10, 20, 30)]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def no_driver_reads(monkeypatch):
    """Fail any tensor read in this (driver) process; worker processes are not affected."""

    def boom(self):
        raise AssertionError(f"the driver read tensor {self.name}")

    monkeypatch.setattr(TensorRecord, "read", boom)


def same(a: xr.Dataset, b: xr.Dataset) -> None:
    a, b = a.copy(), b.copy()
    a.attrs.pop("created"), b.attrs.pop("created")
    xr.testing.assert_identical(a, b)


def test_per_head_statistics_and_a_selection_on_the_cluster_equal_serial(client, llama28, request):
    kw = dict(per_head=True, layers=slice(0, 28, 9), components=["attn.*", "mlp.down"])
    serial = toolkit.weight_stats(llama28, ["stable_rank", "alpha"], progress=False, cache=False, **kw)
    request.getfixturevalue("no_driver_reads")
    ds = toolkit.weight_stats(llama28, ["stable_rank", "alpha"], client=client, progress=False, **kw)
    same(serial, ds)
    assert ds.layer.values.tolist() == [0, 9, 18, 27] and ds.alpha_per_head.notnull().sum() > 0


def test_weight_stats_on_the_cluster_equals_serial_28_layers(client, llama28, request):
    serial = toolkit.weight_stats(llama28, WEIGHT_METRICS, progress=False, cache=False)
    calls = []
    request.getfixturevalue("no_driver_reads")
    ds = toolkit.weight_stats(llama28, WEIGHT_METRICS, client=client, progress=lambda *a: calls.append(a))
    same(serial, ds)
    assert ds.sizes == {"layer": 28, "component": 7} and not ds.stable_rank.isnull().any()
    assert [c[0] for c in calls] == list(range(1, 28 * 7 + 1)) and {c[1] for c in calls} == {28 * 7}
    # all cached now: nothing is submitted, nothing is read, same numbers
    with distributed.get_task_stream(client) as stream:
        again = toolkit.weight_stats(llama28, WEIGHT_METRICS, client=client, progress=False)
    same(serial, again)
    assert stream.data == []


def test_compare_series_on_the_cluster_equals_serial(client, run, request):
    serial = {ref: toolkit.compare_series(run, reference=ref, progress=False, cache=False)
              for ref in ("first", "previous")}
    pair = toolkit.compare(run[0], run[-1], progress=False, cache=False)
    request.getfixturevalue("no_driver_reads")
    for ref, expected in serial.items():
        same(expected, toolkit.compare_series(run, reference=ref, client=client, progress=False))
    same(pair, toolkit.compare(run[0], run[-1], client=client, progress=False))
    assert list(serial["first"].step.values) == [0, 10, 20, 30]
    assert float(serial["first"].relative_change.sel(checkpoint=3).max()) > 0


def test_rerun_after_a_failure_submits_only_what_the_cache_lacks(client, llama28, _own_cache):
    full = toolkit.weight_stats(llama28, ["frobenius_norm", "stable_rank"], client=client, progress=False)
    files = sorted((_own_cache / "weights").rglob("*.json"))
    assert len(files) == 28 * 7
    for f in files[:5]:  # as if the run had died before these five
        f.unlink()
    with distributed.get_task_stream(client) as stream:
        again = toolkit.weight_stats(llama28, ["frobenius_norm", "stable_rank"], client=client, progress=False)
    same(full, again)
    assert len(stream.data) == 5
    assert len(list((_own_cache / "weights").rglob("*.json"))) == 28 * 7


@pytest.fixture
def slow_metric():
    """frobenius_norm that sleeps 40 ms on a Dask worker (not on the driver), so a run lasts long
    enough to kill a worker. Defined in a function: cloudpickle ships it to the workers by value."""

    def slow_norm(w, s):
        import time

        from distributed import get_worker

        try:
            get_worker()
            time.sleep(0.04)
        except ValueError:
            pass
        return float(torch.linalg.matrix_norm(w.double()))

    toolkit.register_metric("slow_norm", slow_norm, long_name="slow Frobenius norm", overwrite=True)
    yield "slow_norm"
    toolkit.metrics.unregister_metric("slow_norm")


def test_a_killed_worker_does_not_lose_the_run(client, llama28, slow_metric):
    metrics = ["frobenius_norm", slow_metric]
    serial = toolkit.weight_stats(llama28, metrics, progress=False, cache=False)
    before = client.run(os.getpid)
    killed = []

    def progress(done, total, name):
        if done == 30 and not killed:
            victim = sorted(before)[0]
            os.kill(before[victim], signal.SIGKILL)
            killed.append(victim)

    ds = toolkit.weight_stats(llama28, metrics, client=client, progress=progress)
    same(serial, ds)
    assert killed and not ds.slow_norm.isnull().any()
    client.wait_for_workers(2, timeout=60)
    after = client.run(os.getpid)
    assert before[killed[0]] not in after.values()  # the nanny started a fresh process


def test_a_checkpoint_a_worker_cannot_read_names_it_and_the_worker(client, tmp_path, monkeypatch, make_hf_cache):
    ckpt = write_tiny_checkpoint(tmp_path / "tiny", "llama", num_layers=2)
    driver_cache, worker_cache = tmp_path / "hf_driver", tmp_path / "hf_worker"
    worker_cache.mkdir()
    make_hf_cache(driver_cache, "org/tiny", {p.name: p for p in ckpt.iterdir()})
    monkeypatch.setenv("HF_HUB_CACHE", str(driver_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def hide(path):  # the workers' own hub cache; returns what was set before
        old = {k: os.environ.get(k) for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE")}
        os.environ.update(HF_HUB_CACHE=path, HF_HUB_OFFLINE="1")
        return old

    def restore(old):
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)

    before = next(iter(client.run(hide, str(worker_cache)).values()))
    try:
        with pytest.raises(WorkerTaskError) as err:
            toolkit.weight_stats("org/tiny", ["frobenius_norm"], client=client, progress=False)
        client.run(hide, str(driver_cache))  # once the workers see the repo, the same call works
        ds = toolkit.weight_stats("org/tiny", ["frobenius_norm"], client=client, progress=False)
    finally:
        client.run(restore, before)
    assert err.value.checkpoint == "org/tiny" and err.value.worker in client.scheduler_info()["workers"]
    assert "'org/tiny'" in str(err.value) and err.value.worker in str(err.value)
    assert "HubUnreachableError" in err.value.reason
    assert ds.sizes["layer"] == 2 and not ds.frobenius_norm.sel(component="attn.q").isnull().any()


def test_a_checkpoint_rewritten_after_planning_is_refused(tmp_path):
    ckpt = write_tiny_checkpoint(tmp_path / "tiny", "llama", num_layers=2)
    plan = plan_pieces(ckpt, cache=False)
    planned = plan.tensors[0]
    measurement = WeightMeasurement.make(["frobenius_norm"])
    work = measurement.lookup(open_cache("x", enabled=False), planned).detached()
    assert work.records is None  # nothing unpicklable travels to the worker
    spec = SourceSpec.of(plan.source)
    stale = SourceSpec(spec.location, (), "0" * 64, False)
    cells = measure_task(measurement, work, (spec,))
    expected = torch.linalg.matrix_norm(planned.pieces[0].extract(planned.record.read()).double())
    assert cells[0].values["frobenius_norm"] == pytest.approx(float(expected), rel=1e-12)
    with pytest.raises(WorkerTaskError, match="another version") as err:
        measure_task(measurement, work, (stale,))
    assert err.value.checkpoint == str(ckpt) and err.value.worker == "?"
    assert WorkerTaskError(*err.value.__reduce__()[1]).args == err.value.args  # travels back intact


def test_cli_series_on_a_scheduler(client, run, tmp_path):
    out = tmp_path / "run.nc"
    address = client.scheduler.address
    assert main(["series", *map(str, run), "--metrics", "relative_change", "update_sparsity",
                 "--scheduler", address, "-o", str(out), "-q"]) == 0
    serial = toolkit.compare_series(run, metrics=["relative_change", "update_sparsity"], progress=False, cache=False)
    loaded = toolkit.load(out)
    assert math.isclose(float(loaded.model_relative_change[-1]), float(serial.model_relative_change[-1]))
    xr.testing.assert_equal(loaded.relative_change, serial.relative_change)


def test_a_bad_client_is_refused(llama28):
    with pytest.raises(toolkit.ToolkitError, match="client="):
        toolkit.weight_stats(llama28, ["frobenius_norm"], client=3.5, progress=False)


def test_workers_read_the_storage_dtype_as_the_serial_path_does(client, run):
    """Entry-wise metrics (any_dtype) get the stored bf16 on the workers too, not a float32 copy."""
    toolkit.register_metric("storage_bits_probe", lambda w, s: float(torch.finfo(w.dtype).bits),
                            long_name="bits of the dtype a metric is handed", any_dtype=True, overwrite=True)
    try:
        serial = toolkit.weight_stats(run[0], ["storage_bits_probe", "frobenius_norm"], progress=False, cache=False)
        ds = toolkit.weight_stats(run[0], ["storage_bits_probe", "frobenius_norm"], client=client, progress=False,
                                  cache=False)
    finally:
        toolkit.metrics.unregister_metric("storage_bits_probe")
    same(serial, ds)
    assert set(ds.storage_bits_probe.values.ravel()) == {16.0}  # bf16 as stored, on both paths


def test_a_worker_never_reuses_a_source_opened_on_other_bytes(client, tmp_path):
    """Re-saved with a longer header (other offsets): a worker that opened the old file opens it again."""
    from safetensors.torch import load_file, save_file

    ckpt = write_tiny_checkpoint(tmp_path / "resaved", "llama", num_layers=2, seed=41)
    toolkit.weight_stats(ckpt, ["frobenius_norm"], client=client, progress=False, cache=False)
    g = torch.Generator().manual_seed(5)
    stored = load_file(str(ckpt / "model.safetensors"))
    tensors = {k: torch.randn(v.shape, generator=g) * 0.02 for k, v in stored.items()}
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt", "note": "x" * 1000})
    ds = toolkit.weight_stats(ckpt, ["frobenius_norm"], client=client, progress=False)
    serial = toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False, cache=False)
    xr.testing.assert_equal(ds.frobenius_norm, serial.frobenius_norm)


@pytest.mark.parametrize("storage", ["float32", "mxfp4"])
def test_moe_expert_slices_are_one_task_each(client, tmp_path, request, storage):
    """gpt-oss's 3-D expert stacks (float, or MXFP4 as the hub stores them): one task per expert slice,
    re-opened by name on the worker; serial's Dataset."""
    from _quant_writers import write_mxfp4_experts
    from toolkit.testing import write_tiny_moe_checkpoint

    folder = write_tiny_moe_checkpoint(tmp_path / "gpt_oss", "gpt_oss", num_layers=2, intermediate_size=32)
    if storage == "mxfp4":
        folder = write_mxfp4_experts(tmp_path / "gpt_oss_mxfp4", folder)
    serial = toolkit.weight_stats(folder, ["frobenius_norm", "stable_rank"], progress=False, cache=False)
    units = [t.record.name for t in plan_pieces(folder, cache=False).tensors]
    names = []
    request.getfixturevalue("no_driver_reads")
    ds = toolkit.weight_stats(folder, ["frobenius_norm", "stable_rank"], client=client,
                              progress=lambda done, total, name: names.append(name))
    assert sorted(names) == sorted(units)  # one task per unit
    assert sum("#expert=" in n for n in names) == 2 * 2 * 4  # 2 layers x 2 stacks x 4 experts
    same(serial, ds)
