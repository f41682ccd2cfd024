"""Attention activations, the attention module and the ViT of the lab."""

import math

import numpy as np
import pytest
import torch

from toolkit.lab import Attention, UnknownActivationError, ViT, frobenius_norm, parse_activation
from toolkit.lab.train import _cpu_settings

S = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0], [2.0, 0.25, -0.5]], dtype=torch.float64)


@pytest.mark.parametrize("text,p,c,label,name", [
    ("softmax", None, None, "softmax", "softmax"),
    ("x/1", 1, 1.0, "x/1", "x/1"),
    ("x/16", 1, 16.0, "x/16", "x/16"),
    ("x³/1", 3, 1.0, "x³/1", "x^3/1"),
    ("x^3/16", 3, 16.0, "x³/16", "x^3/16"),
    ("x**2/4", 2, 4.0, "x²/4", "x^2/4"),
    (" X² / 4 ", 2, 4.0, "x²/4", "x^2/4"),
    ("x^3/sqrt_n", 3, "sqrt_n", "x³/√N", "x^3/sqrt_n"),
    ("x³/√N", 3, "sqrt_n", "x³/√N", "x^3/sqrt_n"),
    ("x^2/0.5", 2, 0.5, "x²/0.5", "x^2/0.5"),
])
def test_parse_labels_and_names_round_trip(text, p, c, label, name):
    a = parse_activation(text)
    assert (a.label, a.name) == (label, name)
    if p is not None:
        assert (a.kind, a.p, a.c) == ("polynomial", p, c)
    assert parse_activation(a.label) == a == parse_activation(a.name)


@pytest.mark.parametrize("bad", ["relu", "x^0/1", "x/0", "x/-2", "y^2/4", "x^2/", ""])
def test_unreadable_activation_is_a_typed_error(bad):
    with pytest.raises(UnknownActivationError) as err:
        parse_activation(bad)
    assert err.value.text == bad and "x^3/16" in str(err.value)


def test_polynomial_equals_formula_on_hand_made_matrix():
    got = parse_activation("x³/16")(S)
    want = np.array([[1, -8, 0.125], [0, 27, -1], [8, 0.015625, -0.125]]) / 16
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(parse_activation("x/1")(S).numpy(), S.numpy())
    np.testing.assert_allclose(parse_activation("x^2/sqrt_n")(S).numpy(), S.numpy() ** 2 / math.sqrt(3))


def test_softmax_rows_are_probabilities_and_norm_within_one_and_sqrt_n():
    a = parse_activation("softmax")(S)
    np.testing.assert_allclose(a.sum(-1).numpy(), 1.0)
    scales = torch.logspace(-3, 3, 500, dtype=torch.float64)[:, None, None]
    scores = torch.randn(500, 17, 17, dtype=torch.float64) * scales
    norms = frobenius_norm(parse_activation("softmax")(scores))
    assert (norms <= math.sqrt(17) + 1e-12).all() and (norms >= 1 - 1e-12).all()
    assert norms.max() > 0.99 * math.sqrt(17)  # huge scores: nearly one-hot rows reach √N
    assert frobenius_norm(torch.eye(5)).item() == pytest.approx(math.sqrt(5))


def test_attention_module_equals_formula_with_explicit_weights():
    torch.manual_seed(0)
    dim, heads, n = 4, 2, 3
    attn = Attention(dim, heads, "x³/16").double()
    x = torch.randn(1, n, dim, dtype=torch.float64)
    w, b = attn.qkv.weight.detach().numpy(), attn.qkv.bias.detach().numpy()
    qkv = x[0].numpy() @ w.T + b
    q, k, v = qkv[:, :dim], qkv[:, dim:2 * dim], qkv[:, 2 * dim:]
    outs, mats = [], []
    for h in range(heads):
        sl = slice(2 * h, 2 * h + 2)
        a = (q[:, sl] @ k[:, sl].T / math.sqrt(2)) ** 3 / 16
        mats.append(a)
        outs.append(a @ v[:, sl])
    want = np.concatenate(outs, -1) @ attn.proj.weight.detach().numpy().T + attn.proj.bias.detach().numpy()
    attn.record = True
    got = attn(x)
    np.testing.assert_allclose(got[0].detach().numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(attn.last_attention[0].numpy(), np.stack(mats), rtol=1e-10, atol=1e-14)


def test_vit_shapes_and_attention_norms():
    model = ViT("x/16", dim=16, depth=12, heads=2)
    assert model.num_tokens == 17
    assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)
    norms = model.attention_norms(torch.rand(5, 1, 8, 8))
    assert norms.shape == (12, 2, 5) and norms.dtype == torch.float64
    assert all(not b.attn.record and b.attn.last_attention is None for b in model.blocks)
    assert ViT(patch_size=4, depth=1).num_tokens == 5


def test_cpu_settings_flush_subnormals_and_restore_threads():
    tiny = torch.tensor([1e-13], dtype=torch.float32)
    threads = torch.get_num_threads()
    with _cpu_settings(1):
        assert torch.get_num_threads() == 1
        if torch.set_flush_denormal(True):  # supported on this CPU (x86 with SSE3)
            assert (tiny * tiny * tiny).item() == 0.0  # 1e-39 would be subnormal
    assert torch.get_num_threads() == threads
    assert (tiny * tiny * tiny).item() > 0.0  # restored: subnormals are back
