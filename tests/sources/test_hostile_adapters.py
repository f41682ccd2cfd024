"""Hostile LoRA adapters: configs and factors peft refuses or reads otherwise, each a typed error or peft's number.

The reference is ``peft`` itself: its merge (``merge_and_unload``), its
refusals, and its own matching rules (``check_target_module_exists``,
``get_pattern_key``).
"""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import peft
import pytest
import torch
from safetensors.torch import load_file

import toolkit
from _edited import edited as edit_copy
from toolkit.errors import CheckpointFileError, CheckpointMismatchError
from toolkit.sources import open_source
from toolkit.sources.lora import open_adapter
from toolkit.testing import write_tiny_adapter

_Q0 = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny llama base and a LoRA adapter of it (every linear adapted, r=4)."""
    return write_tiny_adapter(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A tiny GPT-2 base (Conv1D weights) and a LoRA adapter of it."""
    return write_tiny_adapter(tmp_path_factory.mktemp("gpt2"), "gpt2")


def edited(adapter, folder, config=None, tensors=None):
    """A copy of ``adapter`` with its config updated by ``config`` (a dict) and its tensors by ``tensors(t)``."""
    return edit_copy(adapter, folder, config, tensors, config_name="adapter_config.json",
                     weights_name="adapter_model.safetensors")


def _factor(t, module, part):
    return next(k for k in t if f"{module}.{part}" in k)


def peft_merged(base, adapter, folder):
    """peft's merged model of ``adapter`` on ``base``, saved (the reference checkpoint), and peft's warnings."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = peft.PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.save_pretrained(folder)
    return folder, [str(w.message) for w in caught]


DIFFS = ["relative_change", "cosine_similarity", "subspace_overlap"]


@pytest.mark.parametrize("family, flag", [("llama", True), ("gpt2", False)])
def test_fan_in_fan_out_follows_peft_per_module_type(llama, gpt2, tmp_path, family, flag):
    """peft turns fan_in_fan_out off for an nn.Linear and on for a Conv1D, whatever the config says
    (``dispatch_default``): the merged weights and every diff metric are peft's, with peft's warning."""
    base, adapter = llama if family == "llama" else gpt2
    hostile = edited(adapter, tmp_path / "adapter", {"fan_in_fan_out": flag})
    reference, said = peft_merged(base, hostile, tmp_path / "merged")
    assert any("fan_in_fan_out" in s for s in said)
    with pytest.warns(UserWarning, match=f"fan_in_fan_out is {flag}.*peft sets fan_in_fan_out to {not flag}"):
        got = toolkit.compare(base, hostile, metrics=DIFFS, progress=False, cache=False)
    want = toolkit.compare(base, reference, metrics=DIFFS, progress=False, cache=False)
    for name in DIFFS:
        np.testing.assert_allclose(got[name].values, want[name].values, rtol=2e-5, atol=1e-7, err_msg=name)
    assert np.isfinite(got.cosine_similarity.values).any()
    # weight_stats of ΔW: the record is peft's merged weight minus the base, in the base's orientation
    before = load_file(str(base / "model.safetensors"))
    after = load_file(str(reference / "model.safetensors"))
    with pytest.warns(UserWarning, match="fan_in_fan_out"):
        records = {r.name: r for r in open_source(hostile).tensors()}
    for name, rec in records.items():
        delta = (after[name].double() - before[name].double()).float()
        assert tuple(rec.shape) == tuple(delta.shape)
        assert torch.linalg.norm(rec.read() - delta) <= 1e-5 * torch.linalg.norm(delta), name


def test_target_modules_matching_none_of_the_factors_is_refused(llama, tmp_path):
    """peft refuses a config whose target_modules match nothing; so does the toolkit, naming the module."""
    base, adapter = llama
    hostile = edited(adapter, tmp_path / "a", {"target_modules": ["nothing_here"]})
    import transformers

    with pytest.raises(ValueError, match="not found in the base model"):
        peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), hostile)
    for call in (lambda: toolkit.weight_stats(hostile, progress=False, cache=False),
                 lambda: toolkit.compare(base, hostile, progress=False, cache=False)):
        with pytest.raises(CheckpointFileError, match=r"target_modules \('nothing_here',\).*does not adapt it") as e:
            call()
        assert "adapter_model.safetensors" in e.value.path


@pytest.mark.parametrize("targets", [
    ["q_proj", "v_proj"], "model\\.layers\\.0\\..*", ".*(q|k)_proj", "all-linear", ["layers.1.mlp.up_proj"],
    {"target_modules": ["q_proj"], "layers_to_transform": [1]},
    {"target_modules": ["q_proj"], "layers_to_transform": 0, "layers_pattern": "layers"},
    {"target_modules": ["q_proj", "k_proj"], "exclude_modules": ["k_proj"]},
    {"target_modules": ".*_proj", "exclude_modules": ".*layers\\.1\\..*"},
    {"target_modules": ["q_proj"], "modules_to_save": ["q_proj"]},
])
def test_target_matching_is_peft_s(targets, tmp_path):
    """Which modules an adapter config adapts equals peft's ``check_target_module_exists``, name by name."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    from toolkit.sources.lora.targets import Targets

    raw = targets if isinstance(targets, dict) else {"target_modules": targets}
    ours = Targets.read("adapter_config.json", raw)
    config = LoraConfig(**raw)
    names = [f"model.layers.{i}.{m}" for i in range(3) for m in
             ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj")]
    for name in names:
        theirs = check_target_module_exists(config, name)
        want = bool(theirs) and type(theirs).__name__ != "_ExcludedModule"
        if isinstance(raw.get("target_modules"), str) and raw["target_modules"] == "all-linear":
            want = True  # peft expands it to every linear layer of the model
        assert ours.adapts(name) == want, (targets, name)


def test_delta_of_another_shape_than_the_base_in_weight_stats(llama, tmp_path):
    """A ΔW of (64, 32) on a (32, 32) base parameter is refused by weight_stats (its base's header is read)."""
    base, adapter = llama

    def wide(t):
        t[_factor(t, _Q0, "lora_B")] = torch.randn(64, 4)

    hostile = edited(adapter, tmp_path / "a", tensors=wide)
    with pytest.raises(CheckpointMismatchError, match=r"another shape.*base: shape \(32, 32\), target: shape \(64, "):
        toolkit.weight_stats(hostile, progress=False, cache=False)


def test_compare_with_another_base_than_the_recorded_one_warns(llama, tmp_path):
    """compare(base, adapter) with a base other than the adapter's recorded base warns, naming both and the
    way to say it is the same; the recorded base, or a base named with open_adapter(base=...), does not."""
    base, adapter = llama
    other = tmp_path / "other"
    shutil.copytree(base, other)
    with pytest.warns(UserWarning, match="records the base .* but it is merged into"):
        toolkit.compare(other, adapter, metrics=["relative_change"], progress=False, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        toolkit.compare(base, adapter, metrics=["relative_change"], progress=False, cache=False)
        toolkit.compare(other, open_adapter(adapter, base=other), metrics=["relative_change"], progress=False,
                        cache=False)


@pytest.mark.parametrize("length", [1, 5])
def test_dora_magnitude_of_the_wrong_length(tmp_path, length):
    """A DoRA magnitude must have one entry per output row: peft refuses another length; so does the toolkit
    (a (1,) magnitude once broadcast to every row: a wrong relative_change)."""
    base, adapter = write_tiny_adapter(tmp_path / "dora", "llama", use_dora=True)

    def cut(t):
        key = _factor(t, _Q0, "lora_magnitude_vector")
        t[key] = t[key][:length]

    hostile = edited(adapter, tmp_path / "a", tensors=cut)
    import transformers

    with pytest.raises(RuntimeError, match="size mismatch"):
        peft.PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base), hostile)
    with pytest.raises(CheckpointFileError, match=rf"magnitude vector .*q_proj.lora_magnitude_vector' of shape "
                                                  rf"\({length},\), not \(32,\)") as e:
        toolkit.compare(base, hostile, progress=False, cache=False)
    assert e.value.path.endswith("adapter_model.safetensors")


@pytest.mark.parametrize("config, match", [
    ({"rank_pattern": {"(q_proj": 2}}, r"rank_pattern key '\(q_proj' is not a valid regular expression"),
    ({"alpha_pattern": {"v_proj[": 3}}, r"alpha_pattern key 'v_proj\[' is not a valid regular expression"),
    ({"alpha_pattern": {"q_proj": None}}, r"alpha_pattern\['q_proj'\] is None, not a finite number"),
    ({"alpha_pattern": {"q_proj": [3]}}, r"alpha_pattern\['q_proj'\] is \[3\], not a finite number"),
    ({"rank_pattern": {"q_proj": None}}, r"rank_pattern\['q_proj'\] is None, not a positive integer rank"),
    ({"rank_pattern": {"q_proj": [2]}}, r"rank_pattern\['q_proj'\] is \[2\], not a positive integer rank"),
    ({"rank_pattern": {"q_proj": 2.5}}, r"rank_pattern\['q_proj'\] is 2.5, not a positive integer rank"),
    ({"rank_pattern": ["q_proj"]}, r"rank_pattern is \['q_proj'\], not a mapping"),
    ({"target_modules": "(q_proj"}, r"target_modules '\(q_proj' is not a valid regular expression"),
    ({"target_modules": 7}, r"target_modules is 7, not a str or a list of module names"),
    ({"layers_to_transform": "0"}, r"layers_to_transform is '0', not a layer index"),
    ({"lora_alpha": float("nan")}, r"lora_alpha=nan: expected a positive integer rank and a finite number"),
])
def test_bad_adapter_config_values_are_typed_errors(llama, tmp_path, config, match):
    """Patterns that are no regular expression, pattern values of the wrong kind: one typed error naming
    adapter_config.json and the key, in weight_stats and compare (not re.error, TypeError, ValueError)."""
    base, adapter = llama
    hostile = edited(adapter, tmp_path / "a", config)
    for call in (lambda: toolkit.weight_stats(hostile, progress=False, cache=False),
                 lambda: toolkit.compare(base, hostile, progress=False, cache=False)):
        with pytest.raises(CheckpointFileError, match=match) as e:
            call()
        assert e.value.path.endswith("adapter_config.json")


def test_rank_zero_pattern_with_rank_zero_factors(llama, tmp_path):
    """A rank_pattern of 0 beside rank-0 factors divided alpha by zero; peft refuses r <= 0, so does the toolkit."""
    base, adapter = llama

    def empty(t):
        t[_factor(t, _Q0, "lora_A")] = t[_factor(t, _Q0, "lora_A")][:0]
        t[_factor(t, _Q0, "lora_B")] = t[_factor(t, _Q0, "lora_B")][:, :0]

    hostile = edited(adapter, tmp_path / "a", {"rank_pattern": {"layers.0.self_attn.q_proj": 0}}, empty)
    for call in (lambda: toolkit.weight_stats(hostile, progress=False, cache=False),
                 lambda: toolkit.compare(base, hostile, progress=False, cache=False)):
        with pytest.raises(CheckpointFileError, match=r"is 0, not a positive integer rank \(peft refuses r <= 0\)"):
            call()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_factors_give_a_nan_cell_with_its_reason(llama, tmp_path, value):
    """A NaN or Inf in a factor: that cell is NaN with the reason a dense matrix with NaN gets, the others
    are measured (no LinAlgError from the r x r core)."""
    base, adapter = llama

    def poison(t):
        t[_factor(t, _Q0, "lora_A")][0, 0] = value

    hostile = edited(adapter, tmp_path / "a", tensors=poison)
    ds = toolkit.weight_stats(hostile, metrics=["frobenius_norm", "stable_rank"], progress=False, cache=False)
    cell = ds.sel(layer=0, component="attn.q")
    assert np.isnan(float(cell.stable_rank)) and "NaN/Inf" in str(cell.nan_reason.values)
    assert np.isfinite(ds.stable_rank.sel(layer=0, component="attn.k"))
    assert np.isfinite(ds.stable_rank.sel(layer=1).values).all()


def test_cli_compare_takes_the_one_argument_adapter_form(llama, tmp_path):
    """``python -m toolkit compare ADAPTER`` compares the adapter with its recorded base (toolkit.compare(adapter))."""
    from toolkit.cli import main

    _, adapter = llama
    out = tmp_path / "c.nc"
    assert main(["compare", str(adapter), "--metrics", "relative_change", "-o", str(out), "-q"]) == 0
    want = toolkit.compare(adapter, metrics=["relative_change"], progress=False, cache=False)
    np.testing.assert_allclose(toolkit.load(out).relative_change.values, want.relative_change.values)
