"""Hostile checkpoints through ``activation_stats``: never a model with weights initialised at random, never a
raw error from inside transformers' forward pass; the config is checked before the model is built."""

from __future__ import annotations

import pytest

from _edited import edited
from toolkit.activations import activation_stats
from toolkit.errors import CheckpointFileError, MissingWeightsError
from toolkit.testing import write_tiny_checkpoint, write_tiny_moe_checkpoint

TEXTS = [[1, 5, 7, 9, 3, 4, 11, 2]]


def run(path, **kw):
    return activation_stats(path, TEXTS, progress=False, **kw)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("act")
    return {"llama": write_tiny_checkpoint(root / "llama", "llama", num_layers=2),
            "qwen2_moe": write_tiny_moe_checkpoint(root / "qwen2_moe", "qwen2_moe", num_layers=2),
            "deepseek_v3": write_tiny_moe_checkpoint(root / "deepseek_v3", "deepseek_v3", num_layers=2)}


def test_a_missing_weight_is_refused_naming_it(folders, tmp_path):
    """A llama without layers.0.self_attn.q_proj: transformers initialises it at random (two runs differed in
    14 of 18 variables); refused, listing the key transformers reports missing."""
    import transformers

    hostile = edited(folders["llama"], tmp_path / "m",
                     tensors=lambda t: t.pop("model.layers.0.self_attn.q_proj.weight"))
    _, info = transformers.AutoModelForCausalLM.from_pretrained(hostile, output_loading_info=True)
    assert info["missing_keys"] == {"model.layers.0.self_attn.q_proj.weight"} or \
        list(info["missing_keys"]) == ["model.layers.0.self_attn.q_proj.weight"]
    with pytest.raises(MissingWeightsError, match=r"1 weight\(s\) .*'model.layers.0.self_attn.q_proj.weight'") as e:
        run(hostile)
    assert e.value.missing == ["model.layers.0.self_attn.q_proj.weight"]
    assert str(hostile) in str(e.value)


def test_a_weight_of_another_shape_than_the_config_is_refused(folders, tmp_path):
    """transformers 5 refuses weights of another shape with a RuntimeError: a typed error here."""
    with pytest.raises(CheckpointFileError, match="cannot load its weights into the model its config describes"):
        run(edited(folders["llama"], tmp_path / "m", {"intermediate_size": 32}))


@pytest.mark.parametrize("family, config, match", [
    ("qwen2_moe", {"decoder_sparse_step": 0}, r"decoder_sparse_step=0, not a positive integer"),
    ("qwen2_moe", {"num_experts_per_tok": 5}, r"num_experts_per_tok=5 experts per token, not between 1 and the 4"),
    ("qwen2_moe", {"num_experts_per_tok": 0}, r"num_experts_per_tok=0 experts per token"),
    ("qwen2_moe", {"mlp_only_layers": "0"}, r"transformers refuses its config \(StrictDataclassFieldValidationError"),
    ("deepseek_v3", {"topk_group": 2}, r"n_group=1, topk_group=2: n_group must divide"),
    ("deepseek_v3", {"num_experts_per_tok": 9}, r"num_experts_per_tok=9 experts per token, not between 1 and the 4"),
])
def test_moe_configs_a_forward_pass_cannot_run_are_refused_before_building(folders, tmp_path, family, config, match):
    """MoE router settings that end in a ZeroDivisionError, a RuntimeError from topk, or huggingface_hub's
    StrictDataclassFieldValidationError: one typed error naming the checkpoint, before the model is built."""
    hostile = edited(folders[family], tmp_path / "c", config)
    with pytest.raises(CheckpointFileError, match=match) as e:
        run(hostile, attention=False, gradients=False)
    assert str(hostile) in str(e.value)


def test_complete_checkpoints_still_run(folders):
    for family in ("llama", "qwen2_moe"):
        ds = run(folders[family], attention=False, gradients=False)
        assert ds.sizes["layer"] == 2
