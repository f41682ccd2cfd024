"""``toolkit.plot.esd``: the ESD figure drawn from stored spectra (or from one matrix of a checkpoint)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import toolkit  # noqa: E402
from toolkit.metrics.powerlaw import fit_power_law  # noqa: E402
from toolkit.testing import write_tiny_checkpoint  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("esd") / "m", "llama", num_layers=2, seed=13)


def test_esd_draws_the_stored_spectrum_and_its_fit(ckpt):
    import matplotlib.pyplot as plt

    ds = toolkit.weight_stats(ckpt, ["alpha", "alpha_xmin"], progress=False, keep_spectra=True)
    p = toolkit.plot.prepare_esd(ds, layer=1, component="mlp.up")
    w = load_file(str(ckpt / "model.safetensors"))["model.layers.1.mlp.up_proj.weight"].double().numpy()
    lam = np.sort(np.linalg.eigvalsh(w.T @ w if w.shape[0] > w.shape[1] else w @ w.T))[::-1]
    np.testing.assert_allclose(p.eigenvalues, lam, rtol=1e-9, atol=1e-12 * lam[0])
    fit = fit_power_law(lam)
    assert p.alpha == pytest.approx(fit.alpha, rel=1e-9) and p.xmin == pytest.approx(fit.xmin, rel=1e-9)
    assert p.alpha == float(ds.alpha.sel(layer=1, component="mlp.up"))
    assert p.tail_fraction == pytest.approx(np.mean(lam >= fit.xmin))
    assert "layer 1 mlp.up" in p.title and f"{p.alpha:.3g}" in p.title and p.quality in p.title
    ax = toolkit.plot.esd(ds, layer=1, component="mlp.up")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lbl.startswith("power law, α") for lbl in labels) and any("xmin" in lbl for lbl in labels)
    heights = [patch.get_height() for patch in ax.patches]
    assert len(heights) == 100 and sum(h > 0 for h in heights) > 5
    for kind in ("linear", "logx", "singular_values"):
        ax = toolkit.plot.esd(ds, layer=0, component="attn.v", kind=kind)
        assert ax.get_title() == toolkit.plot.prepare_esd(ds, layer=0, component="attn.v").title
    plt.close("all")


def test_esd_of_a_checkpoint_computes_only_that_matrix(ckpt, reads):
    ax = toolkit.plot.esd(ckpt, layer=0, component="attn.k")
    assert reads == ["model.layers.0.self_attn.k_proj.weight"]
    assert "layer 0 attn.k" in ax.get_title()
    ds = toolkit.weight_stats(ckpt, ["alpha", "alpha_xmin"], progress=False, keep_spectra=True)
    assert reads.count("model.layers.0.self_attn.k_proj.weight") == 1  # the cell was cached with its spectrum
    assert not np.isnan(ds.eigenvalues.sel(layer=0, component="attn.k")).all()


def test_esd_errors_say_what_to_do(ckpt):
    ds = toolkit.weight_stats(ckpt, ["alpha"], progress=False)
    with pytest.raises(toolkit.ToolkitError, match="keep_spectra=True"):
        toolkit.plot.esd(ds, layer=0, component="attn.q")
    with_spectra = toolkit.weight_stats(ckpt, ["alpha"], progress=False, keep_spectra=True)
    with pytest.raises(toolkit.ToolkitError, match="kind must be one of"):
        toolkit.plot.esd(with_spectra, layer=0, component="attn.q", kind="pie")
    with pytest.raises(toolkit.ToolkitError, match="layers=7 selects nothing in this model: the model has 2 layers"):
        toolkit.plot.esd(ckpt, layer=7, component="attn.q")
