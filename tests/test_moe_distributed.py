"""MoE on a Dask cluster: one task per expert slice, read by the worker itself; the same Dataset as serial."""

from __future__ import annotations

import pytest
import xarray as xr

distributed = pytest.importorskip("distributed")

import toolkit  # noqa: E402
from toolkit.collect.plan import plan_pieces  # noqa: E402
from toolkit.sources.base import TensorRecord  # noqa: E402
from toolkit.testing import write_tiny_moe_checkpoint  # noqa: E402

METRICS = ["frobenius_norm", "stable_rank"]


def test_gpt_oss_on_the_cluster_one_task_per_expert_slice(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = write_tiny_moe_checkpoint(tmp_path / "gpt_oss", "gpt_oss", num_layers=2)
    serial = toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    units = [t.record.name for t in plan_pieces(folder, cache=False).tensors]
    names = []

    def boom(self):
        raise AssertionError(f"the driver read tensor {self.name}")

    monkeypatch.setattr(TensorRecord, "read", boom)  # the worker process reads; the driver must not
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        ds = toolkit.weight_stats(folder, METRICS, client=client, progress=lambda done, total, name: names.append(name))
    assert sorted(names) == sorted(units)  # one task per unit
    assert sum("#expert=" in n for n in names) == 2 * 2 * 4  # 2 layers x 2 stacks x 4 experts
    a, b = serial.copy(), ds.copy()
    a.attrs.pop("created"), b.attrs.pop("created")
    xr.testing.assert_identical(a, b)
