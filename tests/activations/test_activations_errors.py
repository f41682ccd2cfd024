"""Hooks leave the computation alone; bad inputs and attention-less settings fail clearly."""

import numpy as np
import pytest
import torch

from toolkit.activations import activation_stats
from toolkit.errors import (
    AttentionUnavailableError,
    EmptyInputError,
    InvalidOptionError,
    SourceNotFoundError,
    TokenizerMissingError,
)
from toolkit.testing import tiny_model

TEXTS = [[5, 9, 33, 4, 70, 12, 8], [6, 7, 8], [100, 3, 44, 51, 2]]


def _hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("family", ["llama", "phi3", "gpt2"])
def test_logits_with_hooks_equal_logits_without(family):
    model = tiny_model(family, num_layers=2)
    seen = []
    pre = model.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    post = model.register_forward_hook(lambda m, a, out: seen[-1].update(logits=out.logits.detach().clone()))
    activation_stats(model, TEXTS, batch_size=3, progress=False)
    pre.remove(), post.remove()
    assert _hooks(model) == 0  # every hook removed
    assert len(seen) == 1 and seen[0]["attention_mask"].tolist()[-1] == [1, 1, 1, 0, 0, 0, 0]
    model.set_attn_implementation("eager")  # what activation_stats ran
    with torch.no_grad():
        plain = model(input_ids=seen[0]["input_ids"], attention_mask=seen[0]["attention_mask"], use_cache=False)
    assert torch.equal(plain.logits, seen[0]["logits"])


def test_a_model_that_returns_no_maps_raises(monkeypatch):
    model = tiny_model("llama", num_layers=2)
    assert model.config._attn_implementation == "sdpa"
    monkeypatch.setattr(model, "set_attn_implementation", lambda name: None)  # a setting stuck on sdpa
    with pytest.raises(AttentionUnavailableError, match="eager") as err:
        activation_stats(model, TEXTS, progress=False)
    assert "no attention map" in str(err.value) and "layer 0" in err.value.where
    assert _hooks(model) == 0 and not model.training
    ds = activation_stats(model, TEXTS, attention=False, progress=False)  # the way out the message names
    assert "attention_entropy" not in ds and np.isfinite(ds.gradient_norm.sel(component="attn.q")).all()


def test_encoder_attention_is_bidirectional_and_has_no_next_token_gradient():
    ds = activation_stats(tiny_model("bert", num_layers=2), TEXTS, batch_size=2, progress=False)
    assert ds.attrs["attention"] == "bidirectional"
    assert np.isfinite(ds.attention_entropy).all() and np.isnan(ds.gradient_norm.sel(component="attn.q")).all()
    assert "no next-token loss" in ds.nan_reason.sel(layer=0, component="attn.q").item()
    assert np.isnan(ds.attrs["mean_next_token_loss"])


def test_gradients_off():
    ds = activation_stats(tiny_model("gpt_neox", num_layers=2), TEXTS, gradients=False, progress=False)
    assert np.isnan(ds.gradient_norm.sel(component="attn.q")).all()
    assert "gradients=False" in ds.nan_reason.sel(layer=1, component="attn.v").item()
    assert np.isfinite(ds.output_rms.sel(component=["attn.q", "attn.k", "attn.v"])).all()  # interleaved QKV


def test_string_texts_need_a_tokenizer():
    with pytest.raises(TokenizerMissingError, match="tokenizer="):
        activation_stats(tiny_model("llama", num_layers=1), ["hello world"], progress=False)


@pytest.mark.parametrize("texts", [[], [[5]], [[5, 6], []]])
def test_empty_or_one_token_texts(texts):
    with pytest.raises(InvalidOptionError if texts == [] else EmptyInputError):
        activation_stats(tiny_model("llama", num_layers=1), texts, progress=False)


def test_missing_source():
    with pytest.raises(SourceNotFoundError):
        activation_stats("/no/such/model/dir", TEXTS, progress=False)
