"""Selecting part of a model (``layers=``, ``components=``, ``experts=``): the cells kept, the tensors read,
the cache serving a wider selection, and the typed errors naming what the model has."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from safetensors.torch import load_file

import toolkit
from toolkit.collect.compare import compare, compare_series
from toolkit.collect.weights import cell_spectrum
from toolkit.errors import InvalidOptionError, SelectionError
from toolkit.testing import write_tiny_checkpoint, write_tiny_moe_checkpoint

pytestmark = pytest.mark.usefixtures("cache")
W = dict(progress=False)
METRICS = ["frobenius_norm", "stable_rank"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("sel") / "m", "llama", num_layers=4, seed=3)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("sel") / "t", "llama", num_layers=4, seed=4)


@pytest.fixture(scope="module")
def full(llama):
    return toolkit.weight_stats(llama, METRICS, cache=False, **W)


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    return write_tiny_moe_checkpoint(tmp_path_factory.mktemp("sel") / "moe", "qwen3_moe", num_layers=3)


def test_layers_as_python_indexes_the_list_of_layers(llama, full):
    for spec, want in ((2, [2]), (-1, [3]), (slice(0, 4, 2), [0, 2]), (range(1, 3), [1, 2]), ([3, 0, 3], [0, 3]),
                       (np.array([1]), [1]), (slice(None, None, -3), [0, 3]), (np.array(2), [2]),
                       (np.int64(-2), [2])):
        ds = toolkit.weight_stats(llama, METRICS, layers=spec, **W)
        assert ds.layer.values.tolist() == want, spec
        xr.testing.assert_equal(ds.stable_rank, full.stable_rank.sel(layer=want))


def test_component_names_patterns_and_groups(llama, full):
    attn = ["attn.q", "attn.k", "attn.v", "attn.o"]
    for spec, want in (("attn", attn), ("attn.*", attn), (["mlp.down", "attn.q"], ["attn.q", "mlp.down"]),
                       ("mlp.[ug]*", ["mlp.up", "mlp.gate"])):
        ds = toolkit.weight_stats(llama, METRICS, components=spec, **W)
        assert ds.component.values.tolist() == want, spec
        xr.testing.assert_equal(ds.frobenius_norm, full.frobenius_norm.sel(component=want))
    assert ds.attrs["selection"] == "components mlp.up, mlp.gate"


def test_only_the_selected_tensors_are_read_and_the_values_are_the_matrices(llama, reads):
    ds = toolkit.weight_stats(llama, METRICS, layers=[1], components=["attn.v", "mlp.down"], **W)
    assert sorted(reads) == ["model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.v_proj.weight"]
    state = load_file(str(llama / "model.safetensors"))
    v = state["model.layers.1.self_attn.v_proj.weight"].double().numpy()
    assert float(ds.frobenius_norm.sel(layer=1, component="attn.v")) == pytest.approx(np.linalg.norm(v), rel=1e-6)
    assert ds.sizes == {"layer": 1, "component": 2}


def test_the_cache_serves_a_later_wider_selection(llama, reads, full):
    toolkit.weight_stats(llama, METRICS, layers=0, **W)
    n = len(reads)
    assert n == 7
    ds = toolkit.weight_stats(llama, METRICS, **W)
    assert len(reads) == n + 3 * 7  # layers 1-3 only
    xr.testing.assert_equal(ds.stable_rank, full.stable_rank)


def test_fill_gives_the_whole_grid_with_the_left_out_cells_marked(llama, full):
    ds = toolkit.weight_stats(llama, METRICS, layers=[1, 2], components="mlp", fill=True, **W)
    assert ds.sizes == {"layer": 4, "component": 7}
    kept = ds.stable_rank.sel(layer=[1, 2], component=["mlp.up", "mlp.down", "mlp.gate"])
    xr.testing.assert_equal(kept, full.stable_rank.sel(layer=[1, 2], component=["mlp.up", "mlp.down", "mlp.gate"]))
    assert ds.stable_rank.sel(layer=0).isnull().all() and ds.stable_rank.sel(component="attn.q").isnull().all()
    assert str(ds.nan_reason.sel(layer=0, component="mlp.up").values) == \
        "not selected (layers 1, 2; components mlp.up, mlp.down, mlp.gate)"
    assert str(ds.nan_reason.sel(layer=1, component="mlp.up").values) == ""


@pytest.mark.parametrize("bad, match", [
    (dict(layers=4), r"layers=4 selects nothing in this model: the model has 4 layers: 0\.\.3"),
    (dict(layers=[0, -5]), r"layers=-5 selects nothing"),
    (dict(layers=slice(10, 20)), r"it selects none of the 4 layers"),
    (dict(components="attn.x"), r"not a component name; this model has attn.q, attn.k, attn.v, attn.o, mlp.up"),
    (dict(components="mlp.router"), r"components='mlp.router' selects nothing in this model: this model has attn"),
    (dict(components=["attn.q", "mlp.shared.*"]), r"'mlp.shared.\*' selects nothing"),
    (dict(experts=0), r"this model has no routed experts"),
])
def test_a_selection_the_model_cannot_meet_names_what_it_has(llama, bad, match):
    with pytest.raises(SelectionError, match=match):
        toolkit.weight_stats(llama, METRICS, **bad, **W)


@pytest.mark.parametrize("bad", [dict(layers="0:3"), dict(layers=1.0), dict(layers=True), dict(layers=[]),
                                 dict(layers=slice(0, 3, 0)), dict(layers=slice(0.5, 3)), dict(components=3),
                                 dict(components=[]), dict(components=["attn.q", None]), dict(experts="all"),
                                 dict(fill="yes"), dict(layers=range(0)), dict(layers=range(3, 1)),
                                 dict(layers=np.array(1.0)), dict(experts=np.array(True))])
def test_a_selection_of_the_wrong_type_is_refused_before_any_work(llama, bad, reads):
    with pytest.raises(InvalidOptionError):
        toolkit.weight_stats(llama, METRICS, **bad, **W)
    assert reads == []


def test_experts_select_routed_experts_and_say_what_the_mean_is_over(moe):
    whole = toolkit.weight_stats(moe, METRICS, cache=False, **W)
    ds = toolkit.weight_stats(moe, METRICS, experts=[1, 3], components=["mlp.up", "mlp.router"], **W)
    assert ds.expert.values.tolist() == [1, 3]
    xr.testing.assert_equal(ds.frobenius_norm_per_expert.sel(component="mlp.up"),
                            whole.frobenius_norm_per_expert.sel(component="mlp.up", expert=[1, 3]))
    mean = whole.frobenius_norm_per_expert.sel(layer=1, component="mlp.up", expert=[1, 3]).mean()
    assert float(ds.frobenius_norm.sel(layer=1, component="mlp.up")) == pytest.approx(float(mean), rel=1e-12)
    assert "the mean over the selected routed experts (1, 3)" in ds.frobenius_norm.attrs["expert_reduction"]
    # the router (not a routed expert) is kept whatever the experts
    xr.testing.assert_equal(ds.frobenius_norm.sel(component="mlp.router"),
                            whole.frobenius_norm.sel(component="mlp.router"))
    with pytest.raises(SelectionError, match=r"experts=9 selects nothing in this model: the model has 4 routed"):
        toolkit.weight_stats(moe, METRICS, experts=9, **W)
    with pytest.raises(SelectionError, match="no matrix of the model is in it; the selected layers hold attn.q"):
        toolkit.weight_stats(moe, METRICS, layers=0, components="mlp.router", **W)  # layer 0 is dense


@pytest.mark.parametrize("experts", [0, [1, 2], -1, slice(0, 4, 2)])
def test_an_expert_selection_keeps_the_models_expert_count(moe, tuned, experts):
    """attrs num_experts is the model's routed-expert count (its config's), not the largest selected index + 1."""
    import json

    want = json.loads((moe / "config.json").read_text())["num_local_experts"]
    assert toolkit.weight_stats(moe, METRICS, cache=False, **W).attrs["num_experts"] == want
    ds = toolkit.weight_stats(moe, METRICS, experts=experts, **W)
    assert ds.attrs["num_experts"] == want
    assert compare(moe, moe, ["relative_change"], experts=experts, **W).attrs["num_experts"] == want


def test_compare_reads_only_the_selected_pairs(llama, tuned, reads):
    whole = compare(llama, tuned, cache=False, **W)
    n = len(reads)
    ds = compare(llama, tuned, layers=slice(2, None), components="attn.o", **W)
    assert len(reads) - n == 2 * 2  # two layers, both sides
    xr.testing.assert_equal(ds.relative_change, whole.relative_change.sel(layer=[2, 3], component=["attn.o"]))
    assert "model_relative_change" not in ds and ds.tensor.values.tolist() == [
        "model.layers.2.self_attn.o_proj.weight", "model.layers.3.self_attn.o_proj.weight"]
    series = compare_series([llama, tuned, llama], components="attn.o", layers=-1, **W)
    assert series.relative_change.dims == ("checkpoint", "layer", "component")
    assert float(series.relative_change.sel(checkpoint=1, layer=3, component="attn.o")) == pytest.approx(
        float(whole.relative_change.sel(layer=3, component="attn.o")), rel=1e-12)


def test_cell_spectrum_is_a_selection_of_one_cell(llama, moe, reads):
    ds = cell_spectrum(llama, layer=2, component="attn.k")
    assert reads == ["model.layers.2.self_attn.k_proj.weight"]
    k = load_file(str(llama / "model.safetensors"))["model.layers.2.self_attn.k_proj.weight"].double().numpy()
    got = ds.eigenvalues.sel(layer=2, component="attn.k").dropna("index").values
    np.testing.assert_allclose(got, np.linalg.svd(k, compute_uv=False) ** 2, rtol=1e-5)
    with pytest.raises(SelectionError, match="holds 4 routed experts: pass expert=0, 1"):
        cell_spectrum(moe, layer=1, component="mlp.up")
    with pytest.raises(SelectionError, match="is not a routed expert's matrix: leave expert out"):
        cell_spectrum(moe, layer=1, component="attn.q", expert=0)
    with pytest.raises(SelectionError, match="the model has 4 layers"):
        cell_spectrum(llama, layer=7, component="attn.k")


@pytest.mark.parametrize("text, expected", [
    ("3", 3), ("-1", -1), ("+2", 2), (" 0 , 4,8 ", [0, 4, 8]), ("0:28:4", slice(0, 28, 4)), (":4", slice(None, 4)),
    ("::-1", slice(None, None, -1)),
])
def test_selection_text_takes_ascii_integers(text, expected):
    from toolkit.collect.plan.selection import parse_index

    assert parse_index(text) == expected


@pytest.mark.parametrize("text", ["1_0", "0:1_0", "\uff11", "1,\uff12", "\u0663", "1 0", "1.5", "0x1", "", "1:2:3:4"])
def test_selection_text_refuses_what_only_python_int_takes(text):
    """``int("1_0") == 10`` and ``int("\\uff11") == 1``: the selection text takes plain ASCII digits only
    (issue 35, class 8)."""
    from toolkit.collect.plan.selection import parse_index

    with pytest.raises(InvalidOptionError, match="ASCII digits 0-9 only") as err:
        parse_index(text, "experts")
    assert err.value.option == "experts" and err.value.value == text
