"""compare / compare_series on tiny checkpoints with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import toolkit
from _compare_data import UP1, bump_ulps, tiny, variant
from toolkit.collect.compare import compare, compare_series, infer_steps
from toolkit.metrics import list_metrics

DIFF_METRICS = ["relative_change", "update_sparsity", "update_density", "delta_stable_rank",
                "delta_effective_rank", "delta_alpha", "delta_matrix_rank", "cosine_similarity", "subspace_overlap",
                "subspace_overlap_sensitivity"]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def base(tmp_path):
    return tiny(tmp_path / "base")


def test_diff_metrics_are_registered_with_metadata():
    assert list_metrics("diff") == DIFF_METRICS
    for name in DIFF_METRICS:
        m = toolkit.get_metric(name)
        assert m.kind == "diff" and m.units == "1" and m.long_name and m.description and m.reference


def test_identical_checkpoints(base, tmp_path):
    ds = compare(base, variant(base, tmp_path / "same"), progress=False)
    assert set(DIFF_METRICS) <= set(ds.data_vars)
    assert ds.relative_change.dims == ("layer", "component") and ds.sizes == {"layer": 3, "component": 7,
                                                                               "tensor": ds.sizes["tensor"]}
    np.testing.assert_array_equal(ds.relative_change, 0.0)
    np.testing.assert_array_equal(ds.update_sparsity, 1.0)
    np.testing.assert_array_equal(ds.update_density, 0.0)
    np.testing.assert_array_equal(ds.cosine_similarity, 1.0)
    np.testing.assert_array_equal(ds.subspace_overlap, 1.0)
    np.testing.assert_array_equal(ds.subspace_overlap_sensitivity, 0.0)
    assert ds.delta_stable_rank.isnull().all()
    assert all("unchanged matrix" in r for r in ds.nan_reason.values.ravel())
    assert float(ds.model_relative_change) == 0.0 and float(ds.model_update_sparsity) == 1.0
    for name in DIFF_METRICS:
        assert {"long_name", "units", "description", "reference"} <= set(ds[name].attrs)


def test_one_changed_matrix_shows_in_exactly_that_cell(base, tmp_path):
    target = variant(base, tmp_path / "t", lambda k, v: -v if k == UP1 else v)  # exact in bf16
    ds = compare(base, target, progress=False)
    changed = ds.relative_change.values > 0
    assert changed.sum() == 1 and float(ds.relative_change.sel(layer=1, component="mlp.up")) == 2.0
    assert (ds.update_sparsity.values < 1).sum() == 1
    assert str(ds.parameter_name.sel(layer=1, component="mlp.up").values) == UP1
    assert float(ds.cosine_similarity.sel(layer=1, component="mlp.up")) == pytest.approx(-1.0, abs=1e-12)
    assert float(ds.subspace_overlap.sel(layer=1, component="mlp.up")) == pytest.approx(1.0, abs=1e-9)
    tensor = ds.tensor_relative_change.to_series()
    assert (tensor > 0).sum() == 1 and tensor[UP1] == 2.0


def test_scaled_copy(base, tmp_path):
    target = variant(base, tmp_path / "t", lambda k, v: 2 * v)  # exact in bf16
    ds = compare(base, target, progress=False)
    np.testing.assert_allclose(ds.relative_change, 1.0, rtol=1e-12)
    np.testing.assert_allclose(ds.cosine_similarity, 1.0, rtol=1e-12)
    np.testing.assert_allclose(ds.subspace_overlap, 1.0, rtol=1e-9)
    np.testing.assert_array_equal(ds.update_sparsity, 0.0)
    assert float(ds.model_relative_change) == pytest.approx(1.0)
    # delta W = W_b: its ranks are the base's own
    w = toolkit.open_source(base)
    rec = next(r for r in w.tensors() if r.name == UP1)
    s = toolkit.metrics.singular_values(rec.read().float())
    assert float(ds.delta_stable_rank.sel(layer=1, component="mlp.up")) == pytest.approx(float((s**2).sum() / s[0]**2))


@pytest.mark.parametrize("count", [1, 37, 512])
def test_one_ulp_moves_give_the_exact_fraction(base, tmp_path, count):
    target = variant(base, tmp_path / "t", lambda k, v: bump_ulps(v, count) if k == UP1 else v)
    ds = compare(base, target, progress=False)
    n = int(ds.n_rows.sel(layer=1, component="mlp.up") * ds.n_cols.sel(layer=1, component="mlp.up"))
    assert float(ds.update_sparsity.sel(layer=1, component="mlp.up")) == 1 - count / n
    assert float(ds.update_density.sel(layer=1, component="mlp.up")) == count / n
    others = ds.update_sparsity.where(ds.parameter_name != UP1)
    assert float(others.min()) == 1.0
    # a tolerance of a few ulps hides them
    loose = compare(base, target, progress=False, tolerance=1e-1)
    assert float(loose.update_sparsity.sel(layer=1, component="mlp.up")) == 1.0
    assert loose.attrs["tolerance"] == 1e-1


def test_gguf_base_against_its_bf16_export(tiny_gguf_dir, tmp_path):
    """A dequantised Q8_0 GGUF against the same weights stored in bf16: unchanged in bf16."""
    from toolkit.finetune import load_causal_lm, save_checkpoint

    gguf = tiny_gguf_dir / "q8_0.gguf"
    model, tok = load_causal_lm(gguf)
    export = save_checkpoint(model, None, tmp_path / "step-00000")
    ds = compare(gguf, export, progress=False)
    np.testing.assert_array_equal(ds.update_sparsity, 1.0)
    rel = ds.relative_change.values
    assert np.all((rel > 0) & (rel < 2.0**-7))  # bf16 rounding of float32 values, nothing more
    assert ds.attrs["base_format"] == "gguf" and ds.attrs["target_format"] == "safetensors"
    assert "model.embed_tokens.weight" in ds.tensor.values and "lm_head.weight" not in ds.tensor.values


def test_tied_embeddings_are_counted_once(base, tmp_path):
    emb = "model.embed_tokens.weight"
    tied = variant(base, tmp_path / "tied", drop=["lm_head.weight"], config={"tie_word_embeddings": True})
    both = compare(tied, variant(tied, tmp_path / "tied2"), progress=False)
    assert emb in both.tensor.values and not any("lm_head" in t for t in both.tensor.values)
    mixed = compare(tied, base, progress=False)  # base has its own lm_head
    assert f"{emb} -> lm_head.weight" in mixed.tensor.values
    reverse = compare(base, tied, progress=False)
    assert f"lm_head.weight -> {emb}" in reverse.tensor.values
    assert list(reverse.tensor.values).count(emb) == 1


def test_series_first_and_previous(base, tmp_path):
    c1 = variant(base, tmp_path / "step-10", lambda k, v: 2 * v if k == UP1 else v)
    c2 = variant(base, tmp_path / "step-20", lambda k, v: 4 * v if k == UP1 else v)
    first = compare_series([base, c1, c2], steps=[0, 10, 20], progress=False)
    assert first.relative_change.dims == ("checkpoint", "layer", "component")
    assert first.step.values.tolist() == [0, 10, 20] and first.attrs["reference"] == "first"
    cell = first.relative_change.sel(layer=1, component="mlp.up")
    np.testing.assert_allclose(cell, [0.0, 1.0, 3.0])
    assert first.reference_step.values.tolist() == [0, 0, 0]
    assert first.attrs["checkpoint_sources"] == [str(base), str(c1), str(c2)]
    assert not any(k.startswith("target_") for k in first.attrs)
    back = toolkit.load(toolkit.save(first, tmp_path / "series.nc"))
    assert back.attrs["checkpoint_sources"] == first.attrs["checkpoint_sources"]
    np.testing.assert_array_equal(back.relative_change, first.relative_change)
    prev = compare_series([base, c1, c2], steps=[0, 10, 20], reference="previous", progress=False)
    np.testing.assert_allclose(prev.relative_change.sel(layer=1, component="mlp.up"), [0.0, 1.0, 1.0])
    assert prev.reference_step.values.tolist() == [0, 0, 10]
    assert float(prev.relative_change.where(prev.parameter_name != UP1).max()) == 0.0
    np.testing.assert_allclose(prev.subspace_overlap, 1.0, rtol=1e-9)
    assert first.model_relative_change.dims == ("checkpoint",)
    # the row against the series' base equals the pairwise compare
    pair = compare(base, c2, progress=False)
    for name in ("relative_change", "update_sparsity", "subspace_overlap", "delta_effective_rank"):
        np.testing.assert_allclose(first[name].isel(checkpoint=2), pair[name], rtol=1e-12)


def test_series_steps_from_folder_names(base, tmp_path):
    c = variant(base, tmp_path / "checkpoint-500", lambda k, v: v)
    assert infer_steps([base, c]) == [0, 1]  # "base" has no number
    assert infer_steps([tmp_path / "step-00000", c]) == [0, 500]
    ds = compare_series([c], progress=False)
    assert ds.step.values.tolist() == [500] and ds.sizes["checkpoint"] == 1


def test_cache_makes_a_rerun_read_nothing(base, tmp_path, monkeypatch):
    target = variant(base, tmp_path / "t", lambda k, v: bump_ulps(v, 3))
    first = compare(base, target, progress=False)
    from toolkit.sources.base import TensorRecord

    def refuse(self):
        raise AssertionError(f"read {self.name} despite the cache")

    monkeypatch.setattr(TensorRecord, "read", refuse)
    again = compare(base, target, progress=False)
    for name in DIFF_METRICS + ["tensor_update_sparsity", "model_relative_change"]:
        np.testing.assert_array_equal(first[name], again[name])
    with pytest.raises(AssertionError, match="despite the cache"):
        compare(base, target, progress=False, k=4)  # another option: subspace_overlap is recomputed


def test_metric_subset_options_and_netcdf_roundtrip(base, tmp_path):
    target = variant(base, tmp_path / "t", lambda k, v: (v.float() + 0.01 * torch.randn(v.shape)).bfloat16())
    ds = compare(base, target, ["relative_change", "subspace_overlap"], k=2, progress=False)
    assert set(ds.data_vars) >= {"relative_change", "subspace_overlap"} and "update_sparsity" not in ds
    assert ds.attrs["subspace_k"] == 2
    assert float(ds.subspace_overlap.min()) > 0.0 and float(ds.subspace_overlap.max()) < 1.0
    back = toolkit.load(toolkit.save(ds, tmp_path / "diff.nc"))
    np.testing.assert_array_equal(back.relative_change, ds.relative_change)
    assert back.tensor.values.tolist() == ds.tensor.values.tolist()


def test_progress_callback_counts_tensors(base, tmp_path):
    calls = []
    compare(base, variant(base, tmp_path / "t"), progress=lambda d, t, n: calls.append((d, t, n)), cache=False)
    assert calls[-1][0] == calls[-1][1] == len(calls) and not math.isnan(len(calls))
