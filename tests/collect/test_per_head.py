"""``weight_stats(per_head=True)``: each attention head's slice (GQA aware), against NumPy on the stored tensors."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from safetensors.torch import load_file

import toolkit
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.per_head import head_slices
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.registry import DegenerateMatrix
from toolkit.testing import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("cache")
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8  # the tiny llama (GQA)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("heads") / "m", "llama", num_layers=2, seed=8)


def numpy_stats(w: np.ndarray) -> tuple[float, float, float]:
    s = np.linalg.svd(w, compute_uv=False)
    return fit_power_law(s**2).alpha, float((s**2).sum() / s[0] ** 2), float(s[0])


def test_heads_match_numpy_slices(llama, reads):
    ds = toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True)
    state = {k: v.double().numpy() for k, v in load_file(str(llama / "model.safetensors")).items()}
    p = "model.layers.1.self_attn."
    for comp, name, dim, n, cols in (("attn.q", "q_proj", "head", HEADS, False),
                                     ("attn.o", "o_proj", "head", HEADS, True),
                                     ("attn.k", "k_proj", "kv_head", KV_HEADS, False),
                                     ("attn.v", "v_proj", "kv_head", KV_HEADS, False)):
        w = state[p + name + ".weight"]
        suffix = "_per_head" if dim == "head" else "_per_kv_head"
        for h in range(n):
            part = w[:, h * HEAD_DIM:(h + 1) * HEAD_DIM] if cols else w[h * HEAD_DIM:(h + 1) * HEAD_DIM]
            alpha, sr, sn = numpy_stats(part)
            cell = ds.sel(layer=1, component=comp, **{dim: h})
            assert float(cell["spectral_norm" + suffix]) == pytest.approx(sn, rel=1e-6)
            assert float(cell["stable_rank" + suffix]) == pytest.approx(sr, rel=1e-6)
            assert float(cell["alpha" + suffix]) == pytest.approx(alpha, rel=1e-6)
    # q/o per query head, k/v per kv head; NaN elsewhere
    assert ds.alpha_per_head.sel(component=["attn.k", "attn.v", "mlp.up"]).isnull().all()
    assert ds.alpha_per_kv_head.sel(component=["attn.q", "attn.o", "mlp.down"]).isnull().all()
    assert ds.kv_head_of_head.values.tolist() == [0, 0, 1, 1]
    assert ds.attrs["num_key_value_heads"] == KV_HEADS and ds.attrs["head_dim"] == HEAD_DIM
    n = len(reads)
    again = toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True)
    assert len(reads) == n  # cells and heads from the cache
    xr.testing.assert_identical(again.alpha_per_head, ds.alpha_per_head)


def test_head_alpha_follows_the_fit_options(llama):
    fit = FitOptions(fix_fingers="clip_xmax", max_fingers=4, finger_thresh=0.1)
    ds = toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True, fit=fit)
    default = toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True)
    w = load_file(str(llama / "model.safetensors"))["model.layers.0.mlp.down_proj.weight"]  # not a head matrix
    assert w.ndim == 2 and ds.alpha_per_head.sel(component="mlp.down").isnull().all()
    o = load_file(str(llama / "model.safetensors"))["model.layers.0.self_attn.o_proj.weight"].double().numpy()
    for h in range(HEADS):
        lam = np.linalg.svd(o[:, h * HEAD_DIM:(h + 1) * HEAD_DIM], compute_uv=False) ** 2
        got = float(ds.alpha_per_head.sel(layer=0, component="attn.o", head=h))
        assert got == pytest.approx(fit_power_law(lam, fix_fingers="clip_xmax", max_fingers=4,
                                                  finger_thresh=0.1).alpha, rel=1e-6)
        assert float(default.alpha_per_head.sel(layer=0, component="attn.o", head=h)) == pytest.approx(
            fit_power_law(lam).alpha, rel=1e-6)


def test_gpt2_fused_qkv_heads(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "g", "gpt2", num_layers=1, seed=2)
    ds = toolkit.weight_stats(path, ["spectral_norm"], progress=False, per_head=True)
    state = load_file(str(path / "model.safetensors"))
    key = next(k for k in state if k.endswith("h.0.attn.c_attn.weight"))
    w = state[key].double().numpy().T  # Conv1D stores (in, out)
    hidden = w.shape[1]
    head_dim = hidden // ds.attrs["num_attention_heads"]
    v = w[2 * hidden:]
    for h in range(ds.attrs["num_key_value_heads"]):
        sn = np.linalg.svd(v[h * head_dim:(h + 1) * head_dim], compute_uv=False)[0]
        assert float(ds.spectral_norm_per_kv_head.sel(layer=0, component="attn.v", kv_head=h)) == pytest.approx(
            sn, rel=1e-6)


def test_a_matrix_that_does_not_split_into_heads_is_refused():
    import torch

    with pytest.raises(DegenerateMatrix, match="not 4 heads x head_dim 8"):
        head_slices(torch.zeros(30, 32), "attn.q", 4, 8)


def test_heads_come_from_the_same_pass_each_tensor_read_once(llama, reads, cache):
    ds = toolkit.weight_stats(llama, ["stable_rank", "alpha"], progress=False, per_head=True)
    assert sorted(reads) == sorted(set(reads))  # every stored tensor read once: cells and heads together
    plain = toolkit.weight_stats(llama, ["stable_rank", "alpha"], progress=False, cache=False)
    xr.testing.assert_identical(ds.stable_rank, plain.stable_rank)
    xr.testing.assert_identical(ds.alpha, plain.alpha)
    # a head is a matrix like any other: the registered alpha on the slice, not a second evaluator
    w = load_file(str(llama / "model.safetensors"))["model.layers.0.self_attn.k_proj.weight"].double().numpy()
    lam = np.linalg.svd(w[HEAD_DIM:2 * HEAD_DIM], compute_uv=False) ** 2
    assert float(ds.alpha_per_kv_head.sel(layer=0, component="attn.k", kv_head=1)) == pytest.approx(
        fit_power_law(lam).alpha, rel=1e-6)


def test_clear_cache_after_a_per_head_run_leaves_nothing(llama, cache):
    toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True)
    info = toolkit.cache_info()
    assert info["files"] > 0
    assert toolkit.clear_cache() == info["bytes"]
    assert toolkit.cache_info() == {"path": str(cache), "files": 0, "bytes": 0}
    left = [p for p in cache.rglob("*") if p.is_file()]
    assert left == []


def test_heads_of_a_config_with_other_head_counts_are_not_served_from_the_cache(llama, tmp_path, cache):
    import json
    import shutil

    toolkit.weight_stats(llama, ["stable_rank"], progress=False, per_head=True)
    other = tmp_path / "m2"
    shutil.copytree(llama, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg.update(num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    (other / "config.json").write_text(json.dumps(cfg))
    ds = toolkit.weight_stats(other, ["stable_rank"], progress=False, per_head=True)
    w = load_file(str(other / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"].double().numpy()
    s = np.linalg.svd(w[16:32], compute_uv=False)
    assert ds.sizes["head"] == 2
    assert float(ds.spectral_norm_per_head.sel(layer=0, component="attn.q", head=1)) == pytest.approx(s[0], rel=1e-6)
