"""Mixture-of-experts checkpoints: the expert dimension, routers, shared experts, stacked 3-D experts.

Every family is written from a tiny config by ``transformers`` itself
(:mod:`toolkit.testing.moe`) and checked against ``from_pretrained`` of the
same folder: each expert's Frobenius norm against the expert matrix
``transformers`` loads (its 3-D ``gate_up_proj`` / ``down_proj``, cut as
its ``forward`` cuts them), and each expert's whole MLP against the loaded
experts module's own ``forward``, so a swapped gate/up or a wrong
interleaving cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import toolkit
from toolkit.testing import MOE_FAMILIES, write_tiny_moe_checkpoint

METRICS = ["frobenius_norm", "stable_rank"]
E = 4
#: Layers with routed experts in the tiny checkpoints (3 layers; qwen*/deepseek: the first is dense).
MOE_LAYERS = {"mixtral": [0, 1, 2], "qwen2_moe": [1, 2], "qwen3_moe": [1, 2], "olmoe": [0, 1, 2],
              "deepseek_v3": [1, 2], "gpt_oss": [0, 1, 2]}
SHARED = {"qwen2_moe": "shared_expert", "deepseek_v3": "shared_experts"}
ROUTER = {"gpt_oss": "router"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return {f: write_tiny_moe_checkpoint(root / f, f) for f in MOE_FAMILIES}


@pytest.fixture(scope="module")
def grids(folders):
    return {f: toolkit.weight_stats(p, METRICS, progress=False, cache=False) for f, p in folders.items()}


def _loaded(folder):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(folder).eval()


def _reference_experts(model, family: str, layer: int) -> dict[str, torch.Tensor]:
    """``{component: (E, out, in)}`` of the loaded experts, cut as the module's ``forward`` cuts them."""
    experts = model.model.layers[layer].mlp.experts
    gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
    if family == "gpt_oss":  # x @ W[e] (in, out); GptOssExperts._apply_gate: gate_up[..., ::2], gate_up[..., 1::2]
        return {"mlp.gate": gate_up[..., ::2].transpose(1, 2), "mlp.up": gate_up[..., 1::2].transpose(1, 2),
                "mlp.down": down.transpose(1, 2)}
    gate, up = gate_up.chunk(2, dim=1)  # linear(x, gate_up_proj[e]).chunk(2, dim=-1): gate rows first
    return {"mlp.gate": gate, "mlp.up": up, "mlp.down": down}


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_each_expert_matches_the_matrix_transformers_loads(family, folders, grids):
    ds, model = grids[family], _loaded(folders[family])
    assert ds.sizes["expert"] == E and list(ds.expert.values) == list(range(E))
    assert list(ds.moe_layers) == MOE_LAYERS[family] and ds.num_experts == E
    for layer in MOE_LAYERS[family]:
        for comp, stack in _reference_experts(model, family, layer).items():
            got = ds.frobenius_norm_per_expert.sel(layer=layer, component=comp).values
            want = torch.linalg.matrix_norm(stack.double()).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-6)
            assert ds.frobenius_norm.sel(layer=layer, component=comp).item() == pytest.approx(got.mean(), rel=1e-12)
            assert ds.stable_rank.sel(layer=layer, component=comp).item() == pytest.approx(
                ds.stable_rank_per_expert.sel(layer=layer, component=comp).values.mean(), rel=1e-12)
    assert "mean over the routed experts" in ds.frobenius_norm.attrs["expert_reduction"]


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_router_shared_and_dense_layers(family, folders, grids):
    ds, model = grids[family], _loaded(folders[family])
    comps = list(ds.component.values)
    assert comps[:7] == list(toolkit.COMPONENTS)
    for layer in MOE_LAYERS[family]:
        mlp = model.model.layers[layer].mlp
        router = getattr(mlp, ROUTER.get(family, "gate")).weight.detach()
        assert ds.frobenius_norm.sel(layer=layer, component="mlp.router").item() == pytest.approx(
            torch.linalg.matrix_norm(router.double()).item(), rel=1e-6)
        if family in SHARED:
            shared = getattr(mlp, SHARED[family])
            for name in ("up", "down", "gate"):
                w = getattr(shared, f"{name}_proj").weight.detach().double()
                assert ds.frobenius_norm.sel(layer=layer, component=f"mlp.shared.{name}").item() == pytest.approx(
                    torch.linalg.matrix_norm(w).item(), rel=1e-6)
    assert ("mlp.shared.up" in comps) == (family in SHARED)
    for layer in sorted(set(range(3)) - set(MOE_LAYERS[family])):  # dense layers of an MoE model: dense cells
        w = model.model.layers[layer].mlp.gate_proj.weight.detach().double()
        assert ds.frobenius_norm.sel(layer=layer, component="mlp.gate").item() == pytest.approx(
            torch.linalg.matrix_norm(w).item(), rel=1e-6)
        assert np.isnan(ds.frobenius_norm_per_expert.sel(layer=layer)).all()
        assert np.isnan(ds.frobenius_norm.sel(layer=layer, component="mlp.router"))
    assert np.isnan(ds.frobenius_norm_per_expert.sel(component="attn.q")).all()


def _toolkit_experts(folder) -> dict:
    """``{(layer, component, expert): matrix}`` as the toolkit's plan reads and cuts them."""
    from toolkit.collect.plan import plan_pieces

    plan = plan_pieces(folder, cache=False)
    out = {}
    for t in plan.tensors:
        for p in t.pieces:
            if p.expert is not None:
                out[p.key] = p.extract(t.record.read())
    return out


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_each_expert_computes_what_the_experts_module_computes(family, folders):
    """The expert's MLP from the toolkit's gate / up / down equals the loaded module's forward routed to it."""
    model, mats = _loaded(folders[family]), _toolkit_experts(folders[family])  # float32: grouped_mm has no float64
    layer = MOE_LAYERS[family][-1]
    experts = model.model.layers[layer].mlp.experts
    if family == "gpt_oss":  # the biases are no components: leave them out of both sides
        with torch.no_grad():
            experts.gate_up_proj_bias.zero_()
            experts.down_proj_bias.zero_()
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    for e in range(E):
        with torch.no_grad():
            want = experts(x, torch.full((5, 1), e), torch.ones(5, 1))
        g, u, d = (mats[(layer, c, e)] for c in ("mlp.gate", "mlp.up", "mlp.down"))
        if family == "gpt_oss":  # GptOssExperts._apply_gate
            gate, up = (x @ g.T).clamp(max=experts.limit), (x @ u.T).clamp(-experts.limit, experts.limit)
            hidden = (up + 1) * gate * torch.sigmoid(gate * experts.alpha)
        else:
            hidden = experts.act_fn(x @ g.T) * (x @ u.T)
        torch.testing.assert_close(hidden @ d.T, want, rtol=1e-5, atol=1e-7)
        assert want.abs().max() > 1e-3  # not a vanishing output that any split would match


def test_stacked_experts_are_read_one_expert_at_a_time(folders):
    """gpt-oss's 3-D stacks become one unit per expert, each reading only its own bytes."""
    from safetensors import safe_open

    from toolkit.collect.plan import plan_pieces

    plan = plan_pieces(folders["gpt_oss"], cache=False)
    stacks = [t for t in plan.tensors if "experts" in t.record.name]
    assert len(stacks) == 3 * 2 * E and all(len(t.record.shape) == 2 for t in stacks)
    with safe_open(str(folders["gpt_oss"] / "model.safetensors"), "pt") as f:
        full = f.get_tensor("model.layers.1.mlp.experts.gate_up_proj")
    sliced = next(t for t in stacks if t.record.name == "model.layers.1.mlp.experts.gate_up_proj#expert=2")
    assert torch.equal(sliced.record.read(), full[2])
    assert [p.component for p in sliced.pieces] == ["mlp.up", "mlp.gate"]
    assert torch.equal(sliced.pieces[1].extract(sliced.record.read()), full[2][:, ::2].T)


def test_plan_cache_and_result_cache_give_the_same_grid(folders, cache, tmp_path):
    """A second run (plan from the plan cache, cells from the result cache) equals a fresh one."""
    import shutil

    folder = shutil.copytree(folders["gpt_oss"], tmp_path / "gpt_oss")
    fresh = toolkit.weight_stats(folder, METRICS, progress=False, cache=False)
    first = toolkit.weight_stats(folder, METRICS, progress=False)
    again = toolkit.weight_stats(folder, METRICS, progress=False)
    for ds in (first, again):
        np.testing.assert_array_equal(ds.frobenius_norm_per_expert.values, fresh.frobenius_norm_per_expert.values)
        np.testing.assert_array_equal(ds.stable_rank.values, fresh.stable_rank.values)


def test_netcdf_round_trip_keeps_the_expert_variables(grids, tmp_path):
    ds = grids["deepseek_v3"]
    toolkit.save(ds, tmp_path / "moe.nc")
    back = toolkit.load(tmp_path / "moe.nc")
    np.testing.assert_array_equal(back.stable_rank_per_expert.values, ds.stable_rank_per_expert.values)
    assert list(back.moe_layers) == [1, 2] and back.num_experts == 4
    ds.to_netcdf(tmp_path / "plain.nc", engine="h5netcdf")  # attrs NetCDF stores as they are


def test_config_with_fewer_experts_than_stored_is_refused(folders, tmp_path):
    import json
    import shutil

    from toolkit.errors import MappingError

    # 6 experts over 4 stored: the router (4, hidden) contradicts the config before the experts are counted
    for family, key, wrong, error in (("gpt_oss", "num_local_experts", 2, MappingError),
                                      ("olmoe", "num_experts", 2, MappingError),
                                      ("olmoe", "num_experts", 6, MappingError)):
        folder = shutil.copytree(folders[family], tmp_path / f"{family}{wrong}")
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, key: wrong}))
        with pytest.raises(error, match=r"experts"):
            toolkit.weight_stats(folder, METRICS, progress=False, cache=False)


def test_unsupported_moe_family_raises_the_clear_error(tmp_path):
    """Families not mapped yet (granitemoe here; also jamba, phimoe, dbrx, llama4...) name what was found."""
    import transformers

    from toolkit.errors import UnsupportedArchitectureError

    cfg = transformers.AutoConfig.for_model("granitemoe", vocab_size=64, hidden_size=32, intermediate_size=16,
                                            num_hidden_layers=1, num_attention_heads=4, num_local_experts=2,
                                            num_experts_per_tok=1)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match=r"(?s)'granitemoe'.*Parameter names found:.*experts"):
        toolkit.weight_stats(tmp_path, METRICS, progress=False, cache=False)


def test_cell_spectrum_of_one_expert(folders, grids):
    from toolkit.collect.weights import cell_spectrum
    from toolkit.errors import ToolkitError

    one = cell_spectrum(folders["olmoe"], layer=1, component="mlp.down", expert=3, metrics=["frobenius_norm"],
                        cache=False)
    want = grids["olmoe"].frobenius_norm_per_expert.sel(layer=1, component="mlp.down", expert=3).item()
    assert one.frobenius_norm.sel(layer=1, component="mlp.down").item() == pytest.approx(want, rel=1e-12)
    eig = one.eigenvalues.sel(layer=1, component="mlp.down").values
    assert np.sum(eig[np.isfinite(eig)]) == pytest.approx(want**2, rel=1e-6)  # sum of eigenvalues of WᵀW = ‖W‖²
    assert one.attrs["expert"] == 3
    with pytest.raises(ToolkitError, match="pass expert="):
        cell_spectrum(folders["olmoe"], layer=1, component="mlp.down", cache=False)


def test_llama4_stacked_experts_in_halves(tmp_path):
    """Llama 4: ``gate_up_proj`` (E, hidden, 2·I) stored (in, out), gate columns first; dense layers between."""
    import transformers

    cfg = transformers.AutoConfig.for_model(
        "llama4_text", vocab_size=64, hidden_size=32, intermediate_size=16, intermediate_size_mlp=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4,
        num_experts_per_tok=1, interleave_moe_layer_step=2, no_rope_layers=[1, 1])
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    ds = toolkit.weight_stats(tmp_path, METRICS, progress=False, cache=False)
    model = _loaded(tmp_path)
    assert list(ds.moe_layers) == [1] and "mlp.shared.up" in ds.component.values
    experts = model.model.layers[1].feed_forward.experts
    gate, up = experts.gate_up_proj.detach().chunk(2, dim=-1)  # Llama4TextExperts.forward
    np.testing.assert_allclose(ds.frobenius_norm_per_expert.sel(layer=1, component="mlp.gate").values,
                               torch.linalg.matrix_norm(gate.double()).numpy(), rtol=1e-6)
    mats = _toolkit_experts(tmp_path)
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = experts(x.repeat(4, 1)).view(4, 3, 32)  # hidden states sorted per expert, 3 tokens each
    for e in range(4):
        g, u, d = (mats[(1, c, e)] for c in ("mlp.gate", "mlp.up", "mlp.down"))
        torch.testing.assert_close((experts.act_fn(x @ g.T) * (x @ u.T)) @ d.T, want[e], rtol=1e-5, atol=1e-7)
    acts = toolkit.activation_stats(tmp_path, texts=[[5, 6, 7, 8], [9, 10]], progress=False, attention=False,
                                    gradients=False)
    assert acts.router_token_fraction.sel(layer=1).sum().item() == pytest.approx(1.0)  # top-1
    assert np.isnan(acts.router_token_fraction.sel(layer=0)).all()
