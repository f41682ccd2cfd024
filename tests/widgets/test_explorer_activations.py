"""The explorer over a real ``activation_stats`` Dataset: every (layer, *) variable can be shown.

The Dataset comes from a tiny grouped-query Qwen2 (2 layers, 4 query heads,
2 key/value heads), so it has variables on (layer, component), (layer, head),
(layer, head, text) and (layer, kv_head), as the embedded SmolLM2 gives.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from toolkit.activations import activation_stats  # noqa: E402
from toolkit.plot import metric_names  # noqa: E402
from toolkit.testing import tiny_model  # noqa: E402
from toolkit.widgets import explore  # noqa: E402


@pytest.fixture(scope="module")
def ds():
    g = torch.Generator().manual_seed(3)
    texts = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (4, 9, 6)]
    return activation_stats(tiny_model("qwen2", num_layers=2), texts, batch_size=2, progress=False)


def test_every_layer_variable_is_offered_and_drawn(ds):
    layered = {str(k) for k, v in ds.data_vars.items() if "layer" in v.dims and v.dtype.kind == "f"}
    assert {ds[n].dims for n in layered} == {("layer", "component"), ("layer", "head"),
                                             ("layer", "head", "text"), ("layer", "kv_head")}
    assert set(metric_names(ds)) == layered
    ex = explore(ds)
    c = ex.controls
    assert [v for _, v in c["metric"].options] == metric_names(ds)
    assert "text" in c and "kv_head" not in c and "head" not in c  # head / kv_head are only columns here
    for name in metric_names(ds):
        c["metric"].value = name
        col = next(d for d in ("component", "head", "kv_head") if d in ds[name].dims)
        assert ex.current is not None, (name, ex.message)
        assert ex.current.metric == name and ex.current.col_dim == col
        assert ex.current.values.shape == (ds.sizes["layer"], ds.sizes[col])
        assert c["text"].disabled == ("text" not in ds[name].dims)
        assert ex.view.layout.display == "" and len(ex.view.spec["panels"]) == 1
    c["metric"].value = "value_head_rms"
    assert ex.current.cols == (0, 1)  # 2 key/value heads, not the 4 query heads
    np.testing.assert_array_equal(ex.current.values, ds["value_head_rms"].values)
    c["robust"].value = False
    finite = ds["value_head_rms"].values
    assert (ex.current.vmin, ex.current.vmax) == (finite.min(), finite.max())


def test_an_activation_cell_offers_no_spectrum_and_reads_no_weights(ds, monkeypatch):
    import toolkit.widgets.cell_matrix as cell_matrix

    def no_read(*args, **kws):
        raise AssertionError("an activation cell must not read a weight matrix")

    monkeypatch.setattr(cell_matrix, "read_cell_matrix", no_read)
    ex = explore(ds, "output_rms")
    hint = ex.view.spec["hint"]
    assert "no spectrum" in hint and "for its spectrum" not in hint and "compute" not in hint
    dd = ex.show_cell(1, "mlp.up")
    assert dd.kinds == [] and dd.panels == [] and "activation statistics" in dd.notes[0]
    assert "layer 1, mlp.up" in ex.cell_text.value


def test_hovering_an_activation_statistic_names_the_module_not_the_weight(ds):
    """Notebook 03's hover showed the weight's "tensor: ...mlp.down_proj.weight / shape: 576 x 1536" over an
    activation statistic: it names the module whose output (or input) it is; dL/dW keeps the weight's lines."""
    ex = explore(ds, "max_abs_activation")
    text = ex.hover_text(1, "mlp.down")
    assert "tensor:" not in text and "shape:" not in text and ".weight" not in text, text
    assert "module: " in text and "mlp.down_proj (its output)" in text, text
    ex.controls["metric"].value = "input_rms"
    assert "mlp.down_proj (its input)" in ex.hover_text(1, "mlp.down")
    if "gradient_norm" in ds:
        ex.controls["metric"].value = "gradient_norm"
        text = ex.hover_text(1, "mlp.down")
        assert "tensor: " in text and "down_proj.weight" in text and "shape: " in text, text
