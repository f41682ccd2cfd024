"""activation_stats against a direct computation from the model's own outputs.

Each text is run alone (no padding) with ``output_hidden_states`` and
``output_attentions``; every component's input and output is rebuilt from the
hidden state entering the block and the returned attention maps, checked
against the hidden state leaving the block, and the statistics computed from
those tensors with numpy. ``activation_stats`` runs the same texts in padded
batches through hooks. Families: llama (grouped-query attention), phi3 (fused
``qkv_proj`` and ``gate_up_proj``, GQA) and gpt2 (fused ``c_attn`` stored
transposed as ``Conv1D``).
"""

import numpy as np
import pytest
import torch

from toolkit.activations import activation_stats
from toolkit.testing import tiny_model

LENGTHS = (7, 12, 3, 9, 5)
H, HD = 4, 8  # tiny configs: 4 query heads of 8


def _texts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 120, (n,), generator=g).tolist() for n in LENGTHS]


def _heads(x, n_heads):  # (N, n_heads * HD) -> (n_heads, N, HD)
    return x.view(x.shape[0], n_heads, HD).transpose(0, 1)


def _attend(a, v, n_kv):  # a (H, N, N), v (N, n_kv*HD) -> (N, H*HD)
    v = _heads(v, n_kv).repeat_interleave(H // n_kv, 0)
    return (a @ v).transpose(0, 1).reshape(a.shape[1], -1)


def _block(model, family, i, x, a):
    """{component: (input, output)} of block ``i`` from its input ``x`` (N, d) and maps ``a``; and its output."""
    if family == "gpt2":
        blk = model.transformer.h[i]
        n1 = blk.ln_1(x)
        qkv = blk.attn.c_attn(n1)
        q, k, v = qkv.split(32, dim=-1)
        o_in = _attend(a, v, H)
        o = blk.attn.c_proj(o_in)
        h = x + o
        n2 = blk.ln_2(h)
        up = blk.mlp.c_fc(n2)
        d_in = blk.mlp.act(up)
        down = blk.mlp.c_proj(d_in)
        parts = {"attn.q": (n1, q), "attn.k": (n1, k), "attn.v": (n1, v), "attn.o": (o_in, o),
                 "mlp.up": (n2, up), "mlp.down": (d_in, down)}
        return parts, h + down
    blk = model.model.layers[i]
    n1 = blk.input_layernorm(x)
    att, mlp = blk.self_attn, blk.mlp
    if family == "phi3":
        qkv = att.qkv_proj(n1)
        q, k, v = qkv[:, :32], qkv[:, 32:48], qkv[:, 48:]
    else:
        q, k, v = att.q_proj(n1), att.k_proj(n1), att.v_proj(n1)
    o_in = _attend(a, v, 2)
    o = att.o_proj(o_in)
    h = x + o
    n2 = blk.post_attention_layernorm(h)
    if family == "phi3":
        gate, up = mlp.gate_up_proj(n2).chunk(2, dim=-1)
        d_in = up * mlp.activation_fn(gate)
    else:
        gate, up = mlp.gate_proj(n2), mlp.up_proj(n2)
        d_in = mlp.act_fn(gate) * up
    down = mlp.down_proj(d_in)
    parts = {"attn.q": (n1, q), "attn.k": (n1, k), "attn.v": (n1, v), "attn.o": (o_in, o),
             "mlp.gate": (n2, gate), "mlp.up": (n2, up), "mlp.down": (d_in, down)}
    return parts, h + down


def _final_norm(model, family):
    return model.transformer.ln_f if family == "gpt2" else model.model.norm


def direct(model, family, texts):
    """Pooled component tensors, per-text attention maps and the next-token loss, text by text."""
    model.set_attn_implementation("eager")
    rows, maps, losses, count = {}, [], [], 0
    for ids in texts:
        ids = torch.tensor([ids])
        out = model(ids, output_hidden_states=True, output_attentions=True)
        hs, att = out.hidden_states, out.attentions
        n_layers = len(att)
        maps.append([a[0].detach().double() for a in att])
        for i in range(n_layers):
            parts, y = _block(model, family, i, hs[i][0], att[i][0])
            got = y if i < n_layers - 1 else _final_norm(model, family)(y)  # the last one is normed
            torch.testing.assert_close(got, hs[i + 1][0], rtol=1e-4, atol=1e-5)
            for comp, (x_in, x_out) in parts.items():
                r = rows.setdefault((i, comp), ([], []))
                r[0].append(x_in.detach().double())
                r[1].append(x_out.detach().double())
        losses.append(torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    pooled = {k: (torch.cat(a).numpy(), torch.cat(b).numpy()) for k, (a, b) in rows.items()}
    return pooled, maps, sum(losses) / count


def _kurtosis(x):
    d = x - x.mean()
    return (d**4).mean() / (d**2).mean() ** 2 - 3  # excess kurtosis, as the weight metric ``kurtosis``


def _rms(x):
    return np.sqrt((x**2).mean())


@pytest.fixture(scope="module", params=["llama", "phi3", "gpt2"])
def case(request):
    family = request.param
    model = tiny_model(family, num_layers=3, seed=1)
    texts = _texts()
    ds = activation_stats(model, texts, batch_size=2, progress=False)
    pooled, maps, loss = direct(model, family, texts)
    return family, model, ds, pooled, maps, loss


def test_component_statistics_match_direct_computation(case):
    family, _, ds, pooled, _, _ = case
    for (layer, comp), (x_in, x_out) in pooled.items():
        cell = ds.sel(layer=layer, component=comp)
        assert float(cell.output_rms) == pytest.approx(_rms(x_out), rel=1e-5), (family, layer, comp)
        assert float(cell.input_rms) == pytest.approx(_rms(x_in), rel=1e-5), (family, layer, comp)
        assert float(cell.activation_kurtosis) == pytest.approx(_kurtosis(x_out), rel=1e-4, abs=1e-4)
        assert float(cell.max_abs_activation) == pytest.approx(np.abs(x_out).max(), rel=1e-5)
    present = {c for _, c in pooled}
    absent = [c for c in ds.component.values if c not in present]
    assert absent == (["mlp.gate"] if family == "gpt2" else [])
    assert np.isnan(ds.output_rms.sel(component=absent).values).all()


def test_per_head_rms_gqa(case):
    family, _, ds, pooled, _, _ = case
    n_kv = 4 if family == "gpt2" else 2
    assert ds.sizes["head"] == H and ds.sizes["kv_head"] == n_kv
    assert ds.kv_group.values.tolist() == [h // (H // n_kv) for h in range(H)]
    for layer in range(3):
        for comp, var, n in (("attn.q", "query_head_rms", H), ("attn.k", "key_head_rms", n_kv),
                             ("attn.v", "value_head_rms", n_kv)):
            out = pooled[(layer, comp)][1].reshape(-1, n, HD)
            want = np.sqrt((out**2).mean(axis=(0, 2)))
            np.testing.assert_allclose(ds[var].sel(layer=layer).values, want, rtol=1e-5)


def test_attention_statistics_match_output_attentions(case):
    _, _, ds, _, maps, _ = case
    for t, per_layer in enumerate(maps):
        for layer, a in enumerate(per_layer):  # a: (H, N, N), the model's own output_attentions
            n = a.shape[-1]
            assert torch.triu(a, 1).abs().max() == 0  # causal
            torch.testing.assert_close(a.sum(-1), torch.ones(H, n, dtype=a.dtype), rtol=0, atol=1e-5)
            fro = a.square().sum((-1, -2)).sqrt().numpy()
            rows = a[:, 1:].numpy()
            ent = -np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1)), 0).sum(-1).mean(-1)
            sink = rows[..., 0].mean(-1)
            assert (fro <= np.sqrt(n) + 1e-9).all()
            sel = dict(layer=layer, text=t)
            np.testing.assert_allclose(ds.attention_frobenius_norm_per_text.sel(**sel).values, fro, rtol=1e-5)
            np.testing.assert_allclose(ds.attention_entropy_per_text.sel(**sel).values, ent, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(ds.attention_sink_mass_per_text.sel(**sel).values, sink, rtol=1e-5)
    for name in ("attention_frobenius_norm", "attention_entropy", "attention_sink_mass"):
        per_text = ds[f"{name}_per_text"]
        np.testing.assert_allclose(ds[name].values, per_text.mean("text").values, rtol=1e-12)
        np.testing.assert_allclose(ds[f"{name}_std"].values, per_text.std("text").values, rtol=1e-12)
        assert ds[name].dims == ("layer", "head") and np.isfinite(ds[name].values).all()


def test_gradient_norm_matches_autograd(case):
    family, model, ds, _, _, loss = case
    blocks = model.transformer.h if family == "gpt2" else model.model.layers
    if family == "gpt2":  # Conv1D (in, out): transpose, then cut c_attn's 3 x 32 columns
        mods = {b: [b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj] for b in blocks}
    elif family == "phi3":
        mods = {b: [b.self_attn.qkv_proj, b.self_attn.o_proj, b.mlp.gate_up_proj, b.mlp.down_proj] for b in blocks}
    else:
        mods = {b: [b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj, b.self_attn.o_proj,
                    b.mlp.up_proj, b.mlp.down_proj, b.mlp.gate_proj] for b in blocks}
    weights = [m.weight for ms in mods.values() for m in ms]
    grads = iter(torch.autograd.grad(loss, weights))
    for layer, b in enumerate(blocks):
        g = [next(grads) for _ in mods[b]]
        if family == "gpt2":
            g = [x.t() for x in g]
            want = dict(zip(("attn.q", "attn.k", "attn.v"), g[0].split(32), strict=True),
                        **{"attn.o": g[1], "mlp.up": g[2], "mlp.down": g[3]})
        elif family == "phi3":
            want = {"attn.q": g[0][:32], "attn.k": g[0][32:48], "attn.v": g[0][48:], "attn.o": g[1],
                    "mlp.gate": g[2][:64], "mlp.up": g[2][64:], "mlp.down": g[3]}
        else:
            want = dict(zip(("attn.q", "attn.k", "attn.v", "attn.o", "mlp.up", "mlp.down", "mlp.gate"), g, strict=True))
        for comp, grad in want.items():
            got = float(ds.gradient_norm.sel(layer=layer, component=comp))
            assert got == pytest.approx(float(grad.norm()), rel=1e-4), (family, layer, comp)
    assert float(ds.attrs["mean_next_token_loss"]) == pytest.approx(loss.detach().item(), rel=1e-5)


def test_batching_does_not_change_the_statistics(case):
    family, model, ds, *_ = case
    one = activation_stats(model, _texts(), batch_size=1, progress=False)
    for name in ("output_rms", "input_rms", "activation_kurtosis", "max_abs_activation", "gradient_norm",
                 "attention_entropy_per_text", "query_head_rms", "key_head_rms"):
        atol = 1e-4 if name == "activation_kurtosis" else 0  # excess kurtosis: near 0 for a near-Gaussian output
        np.testing.assert_allclose(one[name].values, ds[name].values, rtol=1e-4, atol=atol, err_msg=f"{family} {name}")


def test_model_is_left_as_found():
    m = tiny_model("phi3", num_layers=2)
    m.model.embed_tokens.weight.requires_grad_(False)
    m.train()
    impl = m.config._attn_implementation
    activation_stats(m, _texts()[:2], progress=False)
    assert m.training and m.config._attn_implementation == impl
    assert not m.model.embed_tokens.weight.requires_grad
    assert all(p.grad is None for p in m.parameters())
    assert all(p.requires_grad for n, p in m.named_parameters() if "embed_tokens" not in n)


def test_a_selection_hooks_only_its_modules_and_keeps_their_numbers(case):
    family, model, ds, *_ = case
    part = activation_stats(model, _texts(), batch_size=2, progress=False, layers=[0, 2], components="attn")
    attn = ["attn.q", "attn.k", "attn.v", "attn.o"]
    assert part.layer.values.tolist() == [0, 2] and part.component.values.tolist() == attn
    for name in ("output_rms", "input_rms", "max_abs_activation", "gradient_norm", "attention_entropy",
                 "query_head_rms"):
        np.testing.assert_allclose(part[name].values, ds[name].sel(layer=[0, 2]).sel(
            **({"component": attn} if "component" in ds[name].dims else {})).values, rtol=1e-6, err_msg=name)
    mlp = activation_stats(model, _texts(), batch_size=2, progress=False, components="mlp.*", attention=True)
    assert "attn.q" not in mlp.component.values and mlp.attention_entropy.isnull().all()  # no maps recorded
    filled = activation_stats(model, _texts(), batch_size=2, progress=False, layers=-1, fill=True)
    assert filled.sizes["layer"] == 3 and filled.output_rms.sel(layer=[0, 1]).isnull().all()
    assert str(filled.nan_reason.sel(layer=0, component="attn.q").values).startswith("not selected (layers 2")


def test_a_selection_the_model_cannot_meet_is_refused_before_the_model_runs():
    from toolkit.errors import InvalidOptionError, SelectionError

    model = tiny_model("llama", num_layers=2, seed=1)
    with pytest.raises(SelectionError, match="the model has 2 layers"):
        activation_stats(model, _texts(), progress=False, layers=5)
    with pytest.raises(SelectionError, match="this model has no routed experts"):
        activation_stats(model, _texts(), progress=False, experts=0)
    with pytest.raises(InvalidOptionError):
        activation_stats(model, _texts(), progress=False, layers="0:2")
