"""activation_stats on the embedded SmolLM2-135M-Instruct (GGUF, GQA: 9 query / 3 kv heads), offline."""

import numpy as np
import pytest
import torch

from toolkit.activations import activation_stats, load_model, load_prompts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run():
    loaded = load_model()
    texts = [load_prompts()[i] for i in (0, 2, 8)]  # prose, code, Chinese
    seen = []
    model = loaded.model
    pre = model.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    post = model.register_forward_hook(lambda m, a, out: seen[-1].update(logits=out.logits.detach().clone()))
    try:
        ds = activation_stats(loaded, texts, max_tokens=16, batch_size=3, progress=False)
    finally:
        pre.remove(), post.remove()
    return loaded, texts, ds, seen[0]


def test_layout_on_the_embedded_model(run):
    loaded, texts, ds, _ = run
    assert dict(ds.sizes) == {"layer": 30, "component": 7, "head": 9, "kv_head": 3, "text": 3}
    assert ds.kv_group.values.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert ds.attrs["model_type"] == "llama" and ds.attrs["format"] == "gguf"
    assert ds.n_tokens.values.tolist() == [min(16, len(loaded.tokenizer(t)["input_ids"])) for t in texts]
    for name in ("output_rms", "input_rms", "max_abs_activation", "gradient_norm"):
        assert np.isfinite(ds[name]).all() and (ds[name] > 0).all(), name
    assert np.isfinite(ds.activation_kurtosis).all() and (ds.activation_kurtosis >= -2).all()  # excess: >= -2
    assert ((ds.attention_sink_mass >= 0) & (ds.attention_sink_mass <= 1)).all()
    bound = np.sqrt(ds.n_tokens)
    assert (ds.attention_frobenius_norm_per_text <= bound + 1e-9).all()


def test_logits_unchanged_and_maps_match_output_attentions(run):
    loaded, texts, ds, batch = run
    model = loaded.model
    with torch.no_grad():
        plain = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
        assert torch.equal(plain.logits, batch["logits"])
        ids = torch.tensor([loaded.tokenizer(texts[1])["input_ids"][:16]])
        out = model(ids, output_attentions=True)
    for layer in (0, 15, 29):
        a = out.attentions[layer][0].double()  # (9, N, N)
        sink = a[:, 1:, 0].mean(-1).numpy()
        np.testing.assert_allclose(ds.attention_sink_mass_per_text.sel(layer=layer, text=1).values, sink, rtol=1e-4)
