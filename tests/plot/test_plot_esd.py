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
    """One cell of a checkpoint: toolkit.cell_spectrum measures it, plot.esd draws it (plot computes nothing)."""
    with pytest.raises(toolkit.errors.InvalidOptionError, match="toolkit.cell_spectrum"):
        toolkit.plot.esd(ckpt, layer=0, component="attn.k")
    assert reads == []
    cell = toolkit.cell_spectrum(ckpt, layer=0, component="attn.k")
    ax = toolkit.plot.esd(cell, layer=0, component="attn.k")
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
        toolkit.cell_spectrum(ckpt, layer=7, component="attn.q")


@pytest.fixture(autouse=True)
def _close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _bin_of(values, edges):
    """numpy.histogram's rule: bins are half-open, the last one closed."""
    idx = np.searchsorted(edges, values, side="right") - 1
    idx[values == edges[-1]] = len(edges) - 2
    return idx


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_every_eigenvalue_lies_in_exactly_one_bar_for_every_cell_of_the_bundled_models(model, request):
    from dataclasses import replace

    from toolkit.plot.esd_figure import esd_histogram

    ds = toolkit.weight_stats(request.getfixturevalue(model), ["alpha", "alpha_xmin"], progress=False,
                              keep_spectra=True)
    cells = [(int(la), str(c)) for la in ds.layer.values for c in ds.component.values
             if int(ds.n_rows.sel(layer=la, component=c)) > 0]
    assert len(cells) >= 126
    dropped_before = 0
    for layer, comp in cells:
        p = toolkit.plot.prepare_esd(ds, layer=layer, component=comp)
        positive = p.eigenvalues[p.eigenvalues > 0]
        old_edges = np.logspace(np.log10(positive.min()), np.log10(positive.max()), 101)  # the edges before the fix
        dropped_before += int(positive.max() > old_edges[-1] or positive.min() < old_edges[0])
        for kind in ("loglog", "linear"):
            bars = esd_histogram(replace(p, kind=kind))
            assert bars.counted == positive.size, (layer, comp, kind)
            assert bars.edges[-1] == positive.max() == p.xmax and bars.counts[-1] >= 1  # λ_max has its bar
            idx = _bin_of(positive, bars.edges)
            assert ((idx >= 0) & (idx < len(bars.counts))).all()
            np.testing.assert_array_equal(np.bincount(idx, minlength=len(bars.counts)), bars.counts)
            assert float(np.sum(bars.density * np.diff(bars.edges))) == pytest.approx(1.0)
    if model == "smollm2_path":
        assert dropped_before > 0  # the defect was real on this model (86 of its 210 cells)
    p = toolkit.plot.prepare_esd(ds, layer=cells[0][0], component=cells[0][1])
    ax = toolkit.plot.esd(ds, layer=cells[0][0], component=cells[0][1])
    widths = [patch.get_width() for patch in ax.patches]
    heights = [patch.get_height() for patch in ax.patches]
    assert float(np.dot(widths, heights)) == pytest.approx(1.0)  # the drawn bars hold every eigenvalue
    assert ax.patches[-1].get_x() + widths[-1] == pytest.approx(p.xmax) and heights[-1] > 0


def test_side_by_side_esd_titles_do_not_overlap(ckpt):
    import matplotlib.pyplot as plt

    ds = toolkit.weight_stats(ckpt, ["alpha", "alpha_xmin"], progress=False, keep_spectra=True)
    ds.attrs["source"] = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"  # a long model name, as in notebook 01
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    toolkit.plot.esd(ds, layer=0, component="mlp.up", ax=axes[0])
    toolkit.plot.esd(ds, layer=1, component="mlp.down", ax=axes[1])
    toolkit.plot.esd(ds, layer=1, component="mlp.down", ax=axes[2], kind="singular_values")
    fig.tight_layout()
    fig.canvas.draw()
    boxes = [ax.title.get_window_extent() for ax in axes]
    for a, b in zip(boxes, boxes[1:], strict=False):
        assert a.x1 < b.x0, "titles overlap"
