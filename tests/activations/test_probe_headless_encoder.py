"""A head-less encoder checkpoint (the bundled all-MiniLM-L6-v2, a sentence-transformers ``BertModel``) through
``activation_stats``: measured with the base model it holds, not refused as a broken checkpoint because the
masked-LM head the toolkit asked for first is not in it; the statistics are those of transformers' own model run
on each text alone (no padding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from toolkit.activations import activation_stats
from toolkit.bundled import minilm_dir

TEXTS = ["The cat sat on the mat and looked at the dog.", "Hi there", "A longer text about eigenvalues of weights."]


def test_a_headless_bert_checkpoint_is_measured_with_its_base_model():
    ds = activation_stats(minilm_dir(), TEXTS, batch_size=2, gradients=False, progress=False)
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir())
    model = transformers.AutoModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()
    outs = []
    hook = model.encoder.layer[2].output.dense.register_forward_hook(lambda m, i, o: outs.append(o.double()))
    with torch.no_grad():
        for t in TEXTS:
            model(**tok(t, return_tensors="pt"))
    hook.remove()
    values = torch.cat([o.reshape(-1) for o in outs])
    rms = float(values.pow(2).mean().sqrt())
    assert float(ds.output_rms.sel(layer=2, component="mlp.down")) == pytest.approx(rms, rel=1e-6)
    assert float(ds.max_abs_activation.sel(layer=2, component="mlp.down")) == pytest.approx(
        float(values.abs().max()), rel=1e-6)
    assert int(ds.attrs["num_tokens"]) == sum(len(tok(t)["input_ids"]) for t in TEXTS)
    assert np.isnan(ds.attrs["mean_next_token_loss"])  # an encoder: no next-token loss
