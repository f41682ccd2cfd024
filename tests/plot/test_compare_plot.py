"""The line plot of each component's change over steps: prepared data first, then drawing."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402

from toolkit.architectures.vocabulary import COMPONENTS  # noqa: E402
from toolkit.errors import EmptyInputError, UnknownMetricError  # noqa: E402
from toolkit.plot.lines import COMPONENT_COLORS, component_lines, prepare_component_lines  # noqa: E402


def series(steps=(0, 10, 20), layers=4):
    """values[c, l, k] = step * (component index + 1) + layer; mlp.gate all NaN (a model without it)."""
    steps = np.asarray(steps)
    comp = np.arange(len(COMPONENTS))[None, None, :] + 1
    data = steps[:, None, None] * comp + np.arange(layers)[None, :, None] + 0.0
    data[:, :, COMPONENTS.index("mlp.gate")] = np.nan
    ds = xr.Dataset(
        {"relative_change": (("checkpoint", "layer", "component"), data,
                             {"long_name": "relative weight change", "units": "1"})},
        coords={"checkpoint": np.arange(len(steps)), "layer": np.arange(layers), "component": list(COMPONENTS),
                "step": ("checkpoint", steps)},
        attrs={"model_name": "run", "reference": "first"})
    return ds


def test_prepared_lines_are_layer_means_per_component():
    d = prepare_component_lines(series())
    assert d.components == COMPONENTS[:-1]  # mlp.gate has no value: no line
    assert d.labels[0] == "attn.q" and d.colors[0] == COMPONENT_COLORS["attn.q"]
    np.testing.assert_array_equal(d.x, [0, 10, 20])
    np.testing.assert_allclose(d.values[0], [1.5, 11.5, 21.5])  # step * 1 + mean(0..3)
    np.testing.assert_allclose(d.values[COMPONENTS.index("attn.o")], [1.5, 41.5, 81.5])
    assert d.xlabel == "training step" and d.ylabel == "mean relative weight change"
    assert d.title == "run: relative weight change, mean over layers 0-3"


def test_options_layers_components_reduce_and_unsorted_steps():
    ds = series(steps=(20, 0, 10))
    d = prepare_component_lines(ds, layers=(2, 3), components=["mlp.up", "attn.q"], reduce="max")
    assert d.components == ("attn.q", "mlp.up") and d.layers == (2, 3)
    np.testing.assert_array_equal(d.x, [0, 10, 20])
    np.testing.assert_allclose(d.values[0], [3, 13, 23])
    assert "max over layers 2-3" in d.title
    no_step = ds.drop_vars("step")
    assert prepare_component_lines(no_step).xlabel == "checkpoint"


def test_errors():
    ds = series()
    with pytest.raises(UnknownMetricError, match="relative_change"):
        prepare_component_lines(ds, "update_sparsity")
    with pytest.raises(EmptyInputError, match="no layer"):
        prepare_component_lines(ds, layers=[17])
    with pytest.raises(EmptyInputError, match="no finite value"):
        prepare_component_lines(ds, components=["mlp.gate"])
    with pytest.raises(ValueError, match="reduce must be one of"):
        prepare_component_lines(ds, reduce="sum")


def test_drawing_returns_the_axes_with_one_line_per_component():
    fig, ax = plt.subplots()
    try:
        out = component_lines(series(), ax=ax, scale="log")
        assert out is ax and len(ax.lines) == 6 and ax.get_yscale() == "log"
        assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["attn.q", "attn.k"]
        assert len(ax.lines[0].get_xdata()) == 3  # every layer mean is > 0: no point dropped on the log axis
    finally:
        plt.close(fig)
    ax = component_lines(series(), legend=False)
    try:
        assert ax.get_legend() is None and ax.get_xlabel() == "training step"
    finally:
        plt.close(ax.figure)


def test_moe_and_mla_components_get_lines_of_their_own():
    """A series of an MoE/MLA model: the router, shared-expert and latent-attention columns are drawn too."""
    from toolkit.architectures.vocabulary import EXTRA_COMPONENTS

    comps = [*COMPONENTS, *EXTRA_COMPONENTS]
    steps = np.array([0, 10])
    data = steps[:, None, None] * (np.arange(len(comps)) + 1)[None, None, :] + np.arange(3)[None, :, None] + 0.0
    data[:, 0, comps.index("mlp.router")] = np.nan  # a dense first layer: the layer mean skips it
    ds = xr.Dataset({"relative_change": (("checkpoint", "layer", "component"), data, {"long_name": "change"})},
                    coords={"checkpoint": [0, 1], "layer": [0, 1, 2], "component": comps,
                            "step": ("checkpoint", steps)})
    d = prepare_component_lines(ds)
    assert d.components == tuple(comps) and d.labels[-1] == "mlp.shared.gate"
    np.testing.assert_allclose(d.values[comps.index("mlp.router")], [1.5, 10 * 10 + 1.5])  # layers 1, 2 only
    np.testing.assert_allclose(d.values[comps.index("attn.q_a")], [1.0, 81.0])
    assert d.colors[comps.index("mlp.shared.up")] == COMPONENT_COLORS["mlp.up"]
    assert d.linestyles == ("-",) * 7 + ("--",) * 6
    assert prepare_component_lines(ds, components=["mlp.router", "attn.q"]).components == ("attn.q", "mlp.router")
    fig, ax = plt.subplots()
    try:
        component_lines(ds, ax=ax)
        assert len(ax.lines) == 13 and ax.lines[9].get_linestyle() == "--" and ax.lines[0].get_linestyle() == "-"
    finally:
        plt.close(fig)
