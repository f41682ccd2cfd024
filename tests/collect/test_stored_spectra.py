"""``weight_stats(keep_spectra=True)``: every matrix's eigenvalues, stored with its cached cell."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import toolkit
from toolkit.testing import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("cache")


@pytest.fixture
def ckpt(tmp_path):
    return write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, seed=11)


def numpy_eigenvalues(ckpt, name) -> np.ndarray:
    w = load_file(str(ckpt / "model.safetensors"))[name].double().numpy()
    return np.sort(np.linalg.eigvalsh(w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T))[::-1]


def test_eigenvalues_match_numpy_and_are_cached(ckpt, reads, tmp_path):
    ds = toolkit.weight_stats(ckpt, ["stable_rank"], progress=False, keep_spectra=True)
    ev = ds.eigenvalues
    assert ev.dims == ("layer", "component", "index") and ev.attrs["units"] == "1"
    for comp, module in [("attn.q", "self_attn.q_proj"), ("attn.k", "self_attn.k_proj"), ("mlp.down", "mlp.down_proj")]:
        want = numpy_eigenvalues(ckpt, f"model.layers.1.{module}.weight")
        got = ev.sel(layer=1, component=comp).values
        np.testing.assert_allclose(got[: len(want)], want, rtol=1e-9, atol=1e-12 * want[0])
        assert np.isnan(got[len(want):]).all()  # padded past min(out, in)
    # stable rank from the stored spectrum: sum(lambda) / lambda_max
    lam = ev.sel(layer=0, component="mlp.up").values
    lam = lam[~np.isnan(lam)]
    assert float(ds.stable_rank.sel(layer=0, component="mlp.up")) == pytest.approx(lam.sum() / lam[0], rel=1e-9)
    n = len(reads)
    again = toolkit.weight_stats(ckpt, ["stable_rank"], progress=False, keep_spectra=True)
    assert len(reads) == n  # spectra served from the cache
    np.testing.assert_array_equal(again.eigenvalues.values, ds.eigenvalues.values)
    toolkit.save(again, tmp_path / "s.nc")
    loaded = toolkit.load(tmp_path / "s.nc")
    np.testing.assert_array_equal(loaded.eigenvalues.values, ds.eigenvalues.values)


def test_spectra_asked_for_later_are_computed_once(ckpt, reads):
    plain = toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False)
    assert "eigenvalues" not in plain and len(reads) == 14
    with_spectra = toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False, keep_spectra=True)
    assert len(reads) == 28  # read again for the spectra only
    toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False, keep_spectra=True)
    assert len(reads) == 28
    np.testing.assert_array_equal(plain.frobenius_norm.values, with_spectra.frobenius_norm.values)
    w = load_file(str(ckpt / "model.safetensors"))["model.layers.0.self_attn.o_proj.weight"].double()
    lam = with_spectra.eigenvalues.sel(layer=0, component="attn.o").values
    assert np.nansum(lam) == pytest.approx(float((w * w).sum()), rel=1e-9)  # trace of WᵀW = ||W||_F^2


def test_bf16_entrywise_only_still_gets_a_float32_spectrum(tmp_path):
    ckpt = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, seed=12, dtype=torch.bfloat16)
    ds = toolkit.weight_stats(ckpt, ["frobenius_norm"], progress=False, keep_spectra=True, cache=False)
    lam = ds.eigenvalues.sel(layer=0, component="attn.q").values
    fro = float(ds.frobenius_norm.sel(layer=0, component="attn.q"))
    assert np.nansum(lam) == pytest.approx(fro**2, rel=1e-6)
