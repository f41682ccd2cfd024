"""weight_stats end to end on synthetic 28-layer checkpoints of every family."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.architectures.vocabulary import COMPONENTS
from toolkit.testing import write_tiny_checkpoint

NO_GATE = {"bert", "gpt2", "gpt_neox", "phi"}
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "gpt2", "gpt_neox", "bert"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("family", FAMILIES)
def test_complete_28_by_7_grid(tmp_path, family):
    path = write_tiny_checkpoint(tmp_path / family, family, num_layers=28)
    ds = toolkit.weight_stats(path, metrics=["frobenius_norm", "stable_rank"], progress=False, cache=False)
    assert ds.sizes == {"layer": 28, "component": 7}
    assert list(ds.component.values) == list(COMPONENTS)
    fro = ds.frobenius_norm.to_pandas()
    missing = {"mlp.gate"} if family in NO_GATE else set()
    for comp in COMPONENTS:
        col = fro[comp].to_numpy()
        if comp in missing:
            assert np.isnan(col).all()
        else:
            assert np.isfinite(col).all() and (col > 0).all(), comp
    assert ds.attrs["num_hidden_layers"] == 28
    assert ds.attrs["format"] == "safetensors"


def test_values_match_independent_computation(tmp_path):
    """Frobenius norm and stable rank of layer 5's q (GQA llama) against numpy on the stored tensor."""
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=28, max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").exists()
    ds = toolkit.weight_stats(path, metrics=["frobenius_norm", "stable_rank"], progress=False, cache=False)
    tensors = {}
    for f in path.glob("*.safetensors"):
        tensors.update(load_file(f))
    for comp, name in [("attn.q", "q_proj"), ("attn.k", "k_proj"), ("mlp.down", "down_proj")]:
        mod = "mlp" if comp.startswith("mlp") else "self_attn"
        w = tensors[f"model.layers.5.{mod}.{name}.weight"].double().numpy()
        s = np.linalg.svd(w, compute_uv=False)
        cell = ds.sel(layer=5, component=comp)
        assert cell.frobenius_norm.item() == pytest.approx(np.linalg.norm(w), rel=1e-6)
        assert cell.stable_rank.item() == pytest.approx((s**2).sum() / s[0] ** 2, rel=1e-5)
        assert (int(cell.n_rows), int(cell.n_cols)) == w.shape
    # GQA: k has half the rows of q
    assert int(ds.n_rows.sel(layer=0, component="attn.k")) * 2 == int(ds.n_rows.sel(layer=0, component="attn.q"))


def test_degenerate_cells_are_nan_with_reason_and_others_computed(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "qwen2", num_layers=3)
    f = path / "model.safetensors"
    t = load_file(f)
    t["model.layers.1.self_attn.o_proj.weight"] = torch.zeros_like(t["model.layers.1.self_attn.o_proj.weight"])
    nan_w = t["model.layers.2.mlp.up_proj.weight"].clone()
    nan_w[0, 0] = float("nan")
    t["model.layers.2.mlp.up_proj.weight"] = nan_w
    save_file(t, f, metadata={"format": "pt"})
    ds = toolkit.weight_stats(path, progress=False, cache=False)
    zero = ds.sel(layer=1, component="attn.o")
    assert zero.frobenius_norm.item() == 0.0
    assert np.isnan(zero.stable_rank.item())
    assert "stable_rank" in str(zero.nan_reason.values)
    bad = ds.sel(layer=2, component="mlp.up")
    assert all(np.isnan(bad[m].item()) for m in toolkit.list_metrics())
    assert "NaN/Inf" in str(bad.nan_reason.values)
    others = ds.stable_rank.where(ds.parameter_name != "").drop_sel(layer=[1, 2])
    assert np.isfinite(others.values).all()


def test_unknown_metric_lists_known(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    with pytest.raises(toolkit.ToolkitError, match=r"unknown metric 'stable_rnk'.*stable_rank"):
        toolkit.weight_stats(path, metrics=["stable_rnk"], progress=False)


def test_diff_metric_names_point_to_compare(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    with pytest.raises(toolkit.ToolkitError, match=r"'relative_change' is a diff metric, not a weight metric: "
                                                   r"compute it with toolkit\.compare\("):
        toolkit.weight_stats(path, metrics=["relative_change"], progress=False)
    with pytest.raises(toolkit.ToolkitError, match=r"Did you mean 'relative_change'\? It is a diff metric") as err:
        toolkit.weight_stats(path, metrics=["relative_chang"], progress=False)
    assert "update_sparsity" not in str(err.value)  # the known list holds weight metrics only


def test_user_metric_appears_in_dataset(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)

    def top2_share(w, s):
        return float((s[:2] ** 2).sum() / (s**2).sum())

    toolkit.register_metric("top2_energy", top2_share, long_name="energy in top 2 singular values",
                            needs_singular_values=True, overwrite=True)
    try:
        ds = toolkit.weight_stats(path, metrics=["top2_energy"], progress=False, cache=False)
        w = load_file(path / "model.safetensors")["model.layers.1.mlp.up_proj.weight"].double().numpy()
        s = np.linalg.svd(w, compute_uv=False)
        assert ds.top2_energy.sel(layer=1, component="mlp.up").item() == pytest.approx(
            (s[:2] ** 2).sum() / (s**2).sum(), rel=1e-6)
        assert ds.top2_energy.attrs["long_name"] == "energy in top 2 singular values"
    finally:
        from toolkit.metrics.registry import unregister_metric

        unregister_metric("top2_energy")


def test_layer_count_disagreeing_with_config(tmp_path):
    import json

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=3)
    cfg = json.loads((path / "config.json").read_text())
    cfg["num_hidden_layers"] = 4
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(toolkit.ToolkitError, match="num_hidden_layers=4"):
        toolkit.weight_stats(path, progress=False)


def test_no_transformer_weights(tmp_path):
    import json

    d = tmp_path / "m"
    d.mkdir()
    save_file({"encoder.conv.weight": torch.ones(3, 3)}, d / "model.safetensors")
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    with pytest.raises(toolkit.ToolkitError, match="maps to an attention or MLP component"):
        toolkit.weight_stats(d, progress=False)


def test_a_device_this_process_lacks_fails_before_any_work(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    if not torch.cuda.is_available():
        with pytest.raises(toolkit.errors.ToolkitError, match="not available.*device='cpu'"):
            toolkit.weight_stats(path, ["stable_rank"], device="cuda", progress=False)
        with pytest.raises(toolkit.errors.ToolkitError, match="not available"):
            toolkit.compare(path, path, ["relative_change"], device="cuda", progress=False)
    with pytest.raises(toolkit.errors.ToolkitError, match="device='tpu9' is not valid: device must be a device name"):
        toolkit.weight_stats(path, ["stable_rank"], device="tpu9", progress=False)
    with pytest.raises(toolkit.errors.ToolkitError, match="'cpu' or 'cuda'"):
        toolkit.weight_stats(path, ["stable_rank"], device="meta", progress=False)
    assert not list((tmp_path / "cache").rglob("*.json*"))  # nothing was computed, nothing cached


def test_a_failed_computation_is_shown_but_never_cached(tmp_path, monkeypatch):
    import toolkit.metrics.spectral as spectral

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    real = spectral.singular_values

    def broken(*args, **kwargs):
        raise RuntimeError("driver crashed")

    monkeypatch.setattr(spectral, "singular_values", broken)
    failed = toolkit.weight_stats(path, ["stable_rank", "frobenius_norm"], progress=False)
    assert failed.stable_rank.isnull().all() and failed.frobenius_norm.notnull().sum() == 14
    assert "singular values failed: RuntimeError: driver crashed" in str(failed.nan_reason.values[0, 0])
    monkeypatch.setattr(spectral, "singular_values", real)
    again = toolkit.weight_stats(path, ["stable_rank", "frobenius_norm"], progress=False)  # same cache
    fresh = toolkit.weight_stats(path, ["stable_rank", "frobenius_norm"], progress=False, cache=False)
    assert again.stable_rank.notnull().sum() == 14
    np.testing.assert_array_equal(again.stable_rank.values, fresh.stable_rank.values)
