"""Building blocks of the activation statistics: moments, attention formulas, prompts, the Dataset."""

import math

import numpy as np
import pytest
import torch

import toolkit
from toolkit.activations import DEFAULT_PROMPTS, STATS, activation_stats, head_statistics, load_prompts
from toolkit.activations.attention import check_attention_map
from toolkit.activations.hooks import Moments
from toolkit.activations.inputs import batches
from toolkit.errors import AttentionUnavailableError
from toolkit.testing import tiny_model


@pytest.mark.parametrize("dtype, rel", [(torch.float64, 1e-12), (torch.float32, 1e-6), (torch.bfloat16, 1e-6)])
def test_moments_over_batches_like_one_pass(dtype, rel):
    g = torch.Generator().manual_seed(0)
    chunks = [(torch.randn(n, 3, generator=g, dtype=torch.float64) ** 3 * 2 + 100).to(dtype)
              for n in (1, 7, 50, 2)]  # skewed, far from 0
    m = Moments()
    for c in chunks:
        m.add(c)
    x = torch.cat(chunks).double().numpy().ravel()
    d = x - x.mean()
    assert m.n == x.size
    assert m.rms == pytest.approx(np.sqrt((x**2).mean()), rel=rel)
    assert m.kurtosis == pytest.approx((d**4).mean() / (d**2).mean() ** 2 - 3, rel=rel)  # excess kurtosis
    assert m.max_abs == pytest.approx(np.abs(x).max(), rel=rel)
    assert m.mean == pytest.approx(x.mean(), rel=rel)
    cols = torch.cat(chunks).double().numpy()
    np.testing.assert_allclose(m.feature_sumsq().numpy(), (cols**2).sum(0), rtol=rel)
    assert math.isnan(Moments().rms) and math.isnan(Moments().kurtosis)


def _uniform_causal(n):
    a = torch.tril(torch.ones(n, n, dtype=torch.float64))
    return a / a.sum(-1, keepdim=True)


def test_head_statistics_known_maps():
    n = 6
    uniform = _uniform_causal(n)
    identity = torch.eye(n, dtype=torch.float64)
    sink = torch.zeros(n, n, dtype=torch.float64)
    sink[:, 0] = 1
    fro, ent, mass = head_statistics(torch.stack([uniform, identity, sink]), causal=True)
    i = torch.arange(1, n, dtype=torch.float64)  # query rows 1..n-1
    assert fro.tolist() == pytest.approx([math.sqrt(sum(1 / k for k in range(1, n + 1))), math.sqrt(n), math.sqrt(n)])
    assert ent.tolist() == pytest.approx([float(torch.log(i + 1).mean()), 0.0, 0.0])
    assert mass.tolist() == pytest.approx([float((1 / (i + 1)).mean()), 0.0, 1.0])
    full = torch.full((1, n, n), 1 / n, dtype=torch.float64)  # bidirectional: every row counts
    fro, ent, mass = head_statistics(full, causal=False)
    assert (fro.item(), ent.item(), mass.item()) == pytest.approx((1.0, math.log(n), 1 / n))


def test_check_attention_map_refuses_bad_maps():
    good = _uniform_causal(5)[None].float()
    check_attention_map(good, causal=True, where="x")
    with pytest.raises(AttentionUnavailableError, match="above the diagonal"):
        check_attention_map(torch.full((1, 5, 5), 0.2), causal=True, where="x")
    check_attention_map(torch.full((1, 5, 5), 0.2), causal=False, where="x")
    with pytest.raises(AttentionUnavailableError, match="sum to 1"):
        check_attention_map(good * 0.9, causal=True, where="x")
    with pytest.raises(AttentionUnavailableError, match="non-finite"):
        check_attention_map(good * float("nan"), causal=True, where="x")


def test_default_prompts_are_varied():
    texts = load_prompts()
    assert DEFAULT_PROMPTS.name == "prompts.txt" and 30 <= len(texts) <= 60
    joined = "\n".join(texts)
    assert "def " in joined and "SELECT" in joined and "User:" in joined  # code, dialogue
    assert any("\u4e00" <= ch <= "\u9fff" for ch in joined) and "é" in joined and "Москва" in joined
    assert all(t == t.strip() and t for t in texts)


def test_load_prompts_separator(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("one\n\nstill one\n---\n\n---\ntwo\n", encoding="utf-8")
    assert load_prompts(p) == ["one\n\nstill one", "two"]


def test_batches_pad_right_and_group_by_length():
    out = batches([[5, 6], [1, 2, 3, 4], [7, 8, 9]], batch_size=2, pad_id=0)
    assert [b.text_index for b in out] == [[1, 2], [0]]
    assert out[0].input_ids.tolist() == [[1, 2, 3, 4], [7, 8, 9, 0]]
    assert out[0].attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]


@pytest.fixture(scope="module")
def ds():
    g = torch.Generator().manual_seed(3)
    texts = [torch.randint(3, 120, (n,), generator=g).tolist() for n in (4, 9, 6)]
    calls = []
    out = activation_stats(tiny_model("qwen2", num_layers=2), texts, batch_size=2,
                           progress=lambda d, t, name: calls.append((d, t, name)))
    # one unit per layer pass: 2 batches x 2 layers x (forward, backward), backward from the last layer
    passes = ["layer 0 forward", "layer 1 forward", "layer 1 backward", "layer 0 backward"]
    assert calls == [(i + 1, 8, f"batch {i // 4 + 1}/2 ({'2 texts' if i < 4 else '1 text'}): {passes[i % 4]}")
                     for i in range(8)]
    return out


def test_dataset_layout_and_metadata(ds):
    assert dict(ds.sizes) == {"layer": 2, "component": 7, "head": 4, "kv_head": 2, "text": 3}
    assert list(ds.component.values) == list(toolkit.COMPONENTS)
    for name, stat in STATS.items():
        assert ds[name].attrs == stat.attrs() and all(ds[name].attrs.values())
    for name in ("attention_entropy_std", "attention_sink_mass_per_text"):
        assert set(ds[name].attrs) == {"long_name", "units", "description", "reference"}
    assert ds.attention_entropy.attrs["units"] == "nat"
    assert ds.n_tokens.values.tolist() == [4, 9, 6] and ds.text_preview.values[0].startswith("ids ")
    assert ds.attrs["attention"] == "causal" and ds.attrs["num_key_value_heads"] == 2
    assert ds.n_rows.sel(layer=0, component="attn.k").item() == 16  # 2 kv heads x 8
    assert (ds.parameter_name.sel(layer=1, component="attn.q").item()
            == "model.layers.1.self_attn.q_proj.weight")


def test_netcdf_round_trip(ds, tmp_path):
    back = toolkit.load(toolkit.save(ds, tmp_path / "act.nc"))
    for name in ds.data_vars:
        if ds[name].dtype.kind == "f":
            np.testing.assert_array_equal(back[name].values, ds[name].values)
        assert back[name].attrs == ds[name].attrs
    assert back.attrs["mean_next_token_loss"] == pytest.approx(ds.attrs["mean_next_token_loss"])


def test_head_heatmaps_prepare(ds):
    from toolkit.plot import prepare_heatmap

    hm = prepare_heatmap(ds, "attention_sink_mass")
    assert hm.col_dim == "head" and hm.values.shape == (2, 4)
    hm = prepare_heatmap(ds, "attention_entropy_per_text", text=1)
    np.testing.assert_array_equal(hm.values, ds.attention_entropy_per_text.sel(text=1).values)
    assert prepare_heatmap(ds, "max_abs_activation").col_dim == "component"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moments_leave_a_tensor_they_do_not_own_as_it_was_and_agree_when_they_own_it(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(300, 7, generator=g, dtype=torch.float64) * 3 + 5).to(dtype)
    kept = x.clone()
    a, b = Moments(), Moments()
    a.add(x)
    assert torch.equal(x, kept)  # a module's output, which the model reads on
    b.add(x.clone(), owned=True)
    assert (a.mean, a.rms, a.kurtosis, a.max_abs, a.n) == (b.mean, b.rms, b.kurtosis, b.max_abs, b.n)
    assert torch.equal(a.feature_sumsq(), b.feature_sumsq())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("layout", ["bsf", "flat", "latent"])
def test_token_sumsq_counts_only_real_tokens(dtype, layout):
    from toolkit.activations.hooks import Batch, token_rows, token_sumsq

    g = torch.Generator().manual_seed(1)
    lengths = [6, 2, 6, 0 + 1]
    mask = torch.tensor([[i < n for i in range(6)] for n in lengths])
    x = (torch.randn(4, 6, 5, generator=g, dtype=torch.float64) * 3 + 1).to(dtype)
    x[~mask] = 1e4  # padding rows that would dominate any sum that counted them
    shaped = {"bsf": x, "flat": x.reshape(24, 5), "latent": x[:, None]}[layout]
    batch = Batch(mask, lengths, [0, 1, 2, 3])
    sq, n = token_sumsq(shaped, batch, "test")
    real = x.double()[mask]
    assert n == real.numel() == sum(lengths) * 5
    assert sq == pytest.approx(float((real**2).sum()), rel=1e-6)
    assert torch.equal(token_rows(shaped, batch, "test"), x[mask])
    full = Batch(torch.ones(4, 6, dtype=torch.bool), [6] * 4, [0, 1, 2, 3])
    assert token_sumsq(shaped, full, "test")[0] == pytest.approx(float((x.double() ** 2).sum()), rel=1e-6)


def test_next_token_loss_sum_equals_cross_entropy_over_real_targets():
    from toolkit.activations.gradients import next_token_loss_sum

    g = torch.Generator().manual_seed(2)
    vocab, lengths = 11, [5, 3, 1, 5]
    mask = torch.tensor([[i < n for i in range(5)] for n in lengths], dtype=torch.long)
    ids = torch.randint(0, vocab, (4, 5), generator=g)
    logits = torch.randn(4, 5, vocab, generator=g, dtype=torch.float64, requires_grad=True)
    loss, n = next_token_loss_sum(logits, ids, mask)
    # independent: log-softmax by hand, position t predicts token t+1 where that token is real
    logp = logits.detach() - torch.logsumexp(logits.detach(), -1, keepdim=True)
    want = -sum(float(logp[b, t, ids[b, t + 1]]) for b in range(4) for t in range(lengths[b] - 1))
    assert n == sum(n_b - 1 for n_b in lengths)
    assert float(loss.detach()) == pytest.approx(want, rel=1e-6)
    loss.backward()  # the gradient reaches the logits of the predicting positions only
    assert logits.grad[1, 2:].abs().sum() == 0 and logits.grad[2].abs().sum() == 0
    assert logits.grad[0, :4].abs().sum() > 0
