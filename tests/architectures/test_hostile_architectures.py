"""Hostile configs against the stored shapes: declared sizes and counts checked before anything is enumerated
or allocated, missing weights named, never a silent wrong cut.

References: transformers' own loading (``from_pretrained`` refuses a checkpoint whose shapes its config
contradicts, and reports a missing weight), numpy on the stored tensors.
"""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
from safetensors.torch import load_file

import toolkit
from _bounded import run_bounded
from _edited import edited
from toolkit.errors import CheckpointFileError, MappingError, MissingTensorWarning
from toolkit.testing import write_tiny_checkpoint, write_tiny_moe_checkpoint, write_tiny_moe_gguf


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    out = {f: write_tiny_moe_checkpoint(root / f, f, num_layers=2) for f in ("gpt_oss", "qwen3_moe", "deepseek_v3")}
    out["llama"] = write_tiny_checkpoint(root / "llama", "llama", num_layers=2)
    return out


def transformers_refuses(folder) -> None:
    import transformers

    with pytest.raises((RuntimeError, ValueError)):
        transformers.AutoModelForCausalLM.from_pretrained(folder)


# -- item 3: a weight missing from the checkpoint --------------------------------------------------------------------


def test_a_missing_weight_is_a_nan_cell_with_its_reason_and_one_warning(folders, tmp_path):
    """A llama without layers.0.self_attn.q_proj: that cell says "tensor missing from the checkpoint", one
    warning names it (an empty reason and no warning before); the other cells are the full model's."""
    hostile = edited(folders["llama"], tmp_path / "m",
                     tensors=lambda t: t.pop("model.layers.0.self_attn.q_proj.weight"))
    with pytest.warns(MissingTensorWarning, match=r"1 weight\(s\) of the llama layers .*\(layer 0 attn.q\)") as w:
        ds = toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False, cache=False)
    assert sum(issubclass(x.category, MissingTensorWarning) for x in w) == 1
    full = toolkit.weight_stats(folders["llama"], metrics=["frobenius_norm"], progress=False, cache=False)
    assert str(ds.nan_reason.sel(layer=0, component="attn.q").values) == "tensor missing from the checkpoint"
    assert np.isnan(float(ds.frobenius_norm.sel(layer=0, component="attn.q")))
    keep = ds.frobenius_norm.values.copy()
    keep[0, 0] = full.frobenius_norm.values[0, 0]
    np.testing.assert_array_equal(keep, full.frobenius_norm.values)
    assert (ds.nan_reason.values == "tensor missing from the checkpoint").sum() == 1


def test_a_missing_weight_is_said_again_from_the_plan_cache(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    hostile = edited(folders["llama"], tmp_path / "m", tensors=lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    for _ in range(2):  # planned, then from the cached plan
        with pytest.warns(MissingTensorWarning, match="layer 1 mlp.down"):
            ds = toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False)
        assert str(ds.nan_reason.sel(layer=1, component="mlp.down").values) == "tensor missing from the checkpoint"


def test_complete_checkpoints_of_every_moe_family_miss_nothing(folders):
    """The expected components of sparse and dense layers hold for real checkpoints: no warning."""
    for family in ("gpt_oss", "qwen3_moe", "deepseek_v3"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", MissingTensorWarning)
            ds = toolkit.weight_stats(folders[family], metrics=["frobenius_norm"], progress=False, cache=False)
        assert "tensor missing from the checkpoint" not in ds.nan_reason.values


def test_a_missing_expert_component_of_a_sparse_layer_is_named(folders, tmp_path):
    """Qwen3-MoE layer 1 is sparse (layer 0 dense, mlp_only_layers): without its router the cell says so."""
    hostile = edited(folders["qwen3_moe"], tmp_path / "m", tensors=lambda t: t.pop("model.layers.1.mlp.gate.weight"))
    with pytest.warns(MissingTensorWarning, match="layer 1 mlp.router"):
        ds = toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False, cache=False)
    assert str(ds.nan_reason.sel(layer=1, component="mlp.router").values) == "tensor missing from the checkpoint"


# -- item 6: declared sizes swapped -----------------------------------------------------------------------------------


def test_deepseek_nope_and_value_head_dims_swapped_are_refused(folders, tmp_path):
    """qk_nope_head_dim 8 / v_head_dim 6 swapped cut kv_b_proj's rows 6/8 instead of 8/6, silently: now the
    shapes they imply (q_b_proj, o_proj) are checked and the config refused, as transformers refuses it."""
    hostile = edited(folders["deepseek_v3"], tmp_path / "d", {"qk_nope_head_dim": 6, "v_head_dim": 8})
    transformers_refuses(hostile)
    with pytest.raises(MappingError, match=r"qk_nope_head_dim.*but the stored tensor") as e:
        toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False, cache=False)
    assert "self_attn" in e.value.key


def test_deepseek_cells_are_the_stored_rows(folders):
    """With the right config: attn.k / attn.v are rows [0, 8) / [8, 14) of each head's block of kv_b_proj."""
    t = load_file(str(folders["deepseek_v3"] / "model.safetensors"))
    kv = t["model.layers.0.self_attn.kv_b_proj.weight"].double().numpy().reshape(4, 14, -1)
    ds = toolkit.weight_stats(folders["deepseek_v3"], metrics=["frobenius_norm"], progress=False, cache=False)
    np.testing.assert_allclose(float(ds.frobenius_norm.sel(layer=0, component="attn.k")),
                               np.linalg.norm(kv[:, :8]), rtol=1e-6)
    np.testing.assert_allclose(float(ds.frobenius_norm.sel(layer=0, component="attn.v")),
                               np.linalg.norm(kv[:, 8:]), rtol=1e-6)


@pytest.mark.parametrize("config, match", [
    ({"hidden_size": 64}, r"mlp.down of layer 0 the shape \(out, in\) = \(64, 64\) from intermediate_size"),
    ({"num_key_value_heads": 4}, r"attn.k of layer 0 the shape \(out, in\) = \(32, 32\) from num_attention"),
    ({"intermediate_size": 32}, r"mlp.down of layer 0 the shape \(out, in\) = \(32, 32\) from intermediate"),
])
def test_dense_configs_of_another_size_are_refused(folders, tmp_path, config, match):
    """A config whose sizes contradict the stored matrices: refused (as transformers' loader refuses it)."""
    hostile = edited(folders["llama"], tmp_path / "c", config)
    transformers_refuses(hostile)
    with pytest.raises(MappingError, match=match):
        toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False, cache=False)


# -- item 8 and the memory blow-ups from declared counts -------------------------------------------------------------


def test_gpt_oss_down_stack_of_another_expert_width_is_refused(folders, tmp_path):
    """A gpt-oss down stack (4, 18, 32) where the config gives experts of width 16: refused (it was measured)."""
    import torch

    hostile = edited(folders["gpt_oss"], tmp_path / "o", tensors=lambda t: t.__setitem__(
        "model.layers.0.mlp.experts.down_proj", torch.randn(4, 18, 32)))
    transformers_refuses(hostile)
    with pytest.raises(MappingError, match=r"mlp.down of layer 0 \(expert 0\) the shape \(out, in\) = \(32, 16\)"):
        toolkit.weight_stats(hostile, metrics=["frobenius_norm"], progress=False, cache=False)


@pytest.mark.parametrize("family, key, count, match", [
    ("gpt_oss", "num_local_experts", 10**7, r"num_local_experts=10000000 routed experts, but the stored stack"),
    ("qwen3_moe", "num_experts", 10**9, r"mlp.router of layer 1 the shape \(out, in\) = \(1000000000, 32\)"),
])
def test_huge_declared_expert_counts_fail_fast_in_bounded_memory(folders, tmp_path, family, key, count, match):
    """A declared count of 10^7 / 10^9 experts over 4 stored: a typed error within 256 MB and seconds
    (a piece per declared expert first: MemoryError after 85 s at 5.2 GB; 4.9 GB)."""
    hostile = edited(folders[family], tmp_path / "h", {key: count})
    got = run_bounded(f"""
        toolkit.weight_stats({str(hostile)!r}, metrics=["frobenius_norm"], progress=False, cache=False)
        result("measured")
    """, warm=f"toolkit.weight_stats({str(folders[family])!r}, metrics=['frobenius_norm'], progress=False, "
              "cache=False)\n", extra=256 * 2**20, timeout=120)
    assert got.get("typed") and got["error"] == "MappingError", got
    import re

    assert re.search(match, got["message"]), got


@pytest.fixture(scope="module")
def moe_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    folder = write_tiny_moe_checkpoint(root / "st", "qwen2_moe", num_layers=1, mlp_only_layers=[],
                                       moe_intermediate_size=1408)
    return write_tiny_moe_gguf(root / "q.gguf", folder)


def _gguf_with(moe_gguf, tmp_path, key, value):
    import gguf

    path = tmp_path / f"{value}.gguf"
    shutil.copyfile(moe_gguf, path)
    reader = gguf.GGUFReader(str(path), "r+")
    field = reader.fields[key]
    field.parts[field.data[0]][0] = value
    del reader
    return path


@pytest.mark.parametrize("count", [3, 10**6, 10**7, 2**31])
def test_gguf_expert_count_is_checked_against_the_stacks(moe_gguf, tmp_path, count):
    """GGUF expert_count 10^7 or 2^31 over stacks of 4 experts: a typed error naming the key and the stack,
    within 256 MB, before transformers builds anything (MemoryError after 95 s at 5-6.6 GB)."""
    path = _gguf_with(moe_gguf, tmp_path, "qwen2moe.expert_count", count)
    got = run_bounded(f"""
        toolkit.weight_stats({str(path)!r}, metrics=["frobenius_norm"], progress=False, cache=False)
        result("measured")
    """, warm=f"toolkit.weight_stats({str(moe_gguf)!r}, metrics=['frobenius_norm'], progress=False, cache=False)\n",
        extra=256 * 2**20, timeout=120)
    assert got.get("typed") and got["error"] == "CheckpointFileError", got
    assert f"qwen2moe.expert_count (num_experts)={count} routed experts, but the stack 'blk.0.ffn_" in got["message"]
    assert path.name in got["message"]


@pytest.mark.parametrize("used", [0, 5])
def test_gguf_experts_per_token_beyond_the_experts(moe_gguf, tmp_path, used):
    path = _gguf_with(moe_gguf, tmp_path, "qwen2moe.expert_used_count", used)
    with pytest.raises(CheckpointFileError, match=rf"expert_used_count \(num_experts_per_tok\)={used} experts per"):
        toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)
