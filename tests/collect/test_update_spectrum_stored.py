"""``compare(..., keep_spectra=True)``: the ESD of the update dW = W_t - W_b per cell, cached, drawn by ``plot.esd``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr
from safetensors.torch import load_file

import toolkit
from _compare_data import tiny, variant
from toolkit.errors import ToolkitError
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.plot.esd_figure import prepare_esd

pytestmark = pytest.mark.usefixtures("cache")
UP = "model.layers.1.mlp.up_proj.weight"
Q0 = "model.layers.0.self_attn.q_proj.weight"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("upd")
    base = tiny(root / "base", num_layers=2, dtype=torch.float32, seed=3)
    gen = torch.Generator().manual_seed(1)

    def change(name, t):
        if name == Q0:  # a rank-2 update
            return t + 0.05 * torch.randn(t.shape[0], 2, generator=gen) @ torch.randn(2, t.shape[1], generator=gen)
        if name.endswith("proj.weight"):
            return t + 0.02 * torch.randn(t.shape, generator=gen)
        return t

    target = variant(base, root / "target", change)
    later = variant(base, root / "later", lambda n, t: change(n, t) * 1.01 if n.endswith("proj.weight") else t)
    return base, target, later


def update_eigenvalues(base, target, name) -> np.ndarray:
    d = (load_file(str(target / "model.safetensors"))[name].double()
         - load_file(str(base / "model.safetensors"))[name].double()).numpy()
    return np.sort(np.linalg.eigvalsh(d.T @ d if d.shape[0] >= d.shape[1] else d @ d.T))[::-1]


def test_update_spectrum_matches_numpy_and_is_cached(pair, reads, tmp_path):
    base, target, _ = pair
    ds = toolkit.compare(base, target, ["delta_alpha", "delta_matrix_rank"], progress=False, keep_spectra=True)
    ev = ds.eigenvalues
    assert ev.dims == ("layer", "component", "index") and ev.attrs["matrix"] == "update W_target - W_base"
    want = update_eigenvalues(base, target, UP)
    got = ev.sel(layer=1, component="mlp.up").values
    np.testing.assert_allclose(got[: want.size], want, rtol=1e-5, atol=1e-9 * want[0])
    assert np.isnan(got[want.size:]).all() and np.all(np.diff(got[: want.size]) <= 0)
    # the rank-2 update: two eigenvalues above the rank tolerance, as delta_matrix_rank counts
    q = ev.sel(layer=0, component="attn.q").values
    assert float(ds.delta_matrix_rank.sel(layer=0, component="attn.q")) == 2.0
    assert np.count_nonzero(q > q[0] * 1e-6) == 2
    # delta_alpha is the default fit of this stored spectrum
    lam = got[~np.isnan(got)]
    assert float(ds.delta_alpha.sel(layer=1, component="mlp.up")) == pytest.approx(fit_power_law(lam).alpha, rel=1e-6)
    ds.to_netcdf(tmp_path / "c.nc")
    with xr.open_dataset(tmp_path / "c.nc") as back:
        assert back.eigenvalues.attrs["matrix"] == "update W_target - W_base"
        np.testing.assert_array_equal(back.eigenvalues.values, ev.values)
    n = len(reads)
    again = toolkit.compare(base, target, ["delta_alpha"], progress=False, keep_spectra=True)
    assert len(reads) == n  # every cell's spectrum and value came from the cache
    np.testing.assert_array_equal(again.eigenvalues.values, ev.values)


def test_spectrum_asked_later_reads_the_pair_again_once(pair, reads):
    base, target, _ = pair
    toolkit.compare(base, target, ["relative_change"], progress=False)
    n = len(reads)
    toolkit.compare(base, target, ["relative_change"], progress=False, keep_spectra=True)
    assert len(reads) > n  # the spectra were not cached yet
    m = len(reads)
    toolkit.compare(base, target, ["relative_change"], progress=False, keep_spectra=True)
    assert len(reads) == m


def test_series_spectra_have_a_checkpoint_dim_and_plot_needs_one(pair):
    base, target, later = pair
    s = toolkit.compare_series([base, target, later], metrics=["delta_alpha"], progress=False, keep_spectra=True)
    assert s.eigenvalues.dims == ("checkpoint", "layer", "component", "index")
    first = s.eigenvalues.isel(checkpoint=0).values
    assert np.all(first[~np.isnan(first)] == 0.0)  # the first checkpoint against itself
    want = update_eigenvalues(base, later, UP)
    np.testing.assert_allclose(s.eigenvalues.sel(checkpoint=2, layer=1, component="mlp.up").values[: want.size],
                               want, rtol=1e-5, atol=1e-9 * want[0])
    with pytest.raises(ToolkitError, match="checkpoint=0..2"):
        prepare_esd(s, layer=1, component="mlp.up")
    with pytest.raises(ToolkitError, match="did not change"):
        prepare_esd(s, layer=1, component="mlp.up", checkpoint=0)
    p = prepare_esd(s, layer=1, component="mlp.up", checkpoint=2)
    assert p.update and "update" in p.title
    assert p.alpha == pytest.approx(float(s.delta_alpha.sel(checkpoint=2, layer=1, component="mlp.up")), rel=1e-9)


def test_plot_esd_draws_the_update(pair):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base, target, _ = pair
    ds = toolkit.compare(base, target, ["delta_alpha"], progress=False, keep_spectra=True)
    ax = toolkit.plot.esd(ds, layer=1, component="mlp.up")
    assert "update ΔW" in ax.get_title() and "ΔWᵀΔW" in ax.get_xlabel()
    lam = ds.eigenvalues.sel(layer=1, component="mlp.up").values
    fit = fit_power_law(lam[~np.isnan(lam)])
    assert f"α = {fit.alpha:.3g}" in ax.get_title()
    plt.close(ax.figure)
    with pytest.raises(ToolkitError, match="checkpoint dim"):
        prepare_esd(ds, layer=1, component="mlp.up", checkpoint=1)
