"""One image's attention matrices, checked against scores recomputed by hand from q and k, and its patches."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from toolkit.errors import InvalidOptionError  # noqa: E402
from toolkit.lab import ViT  # noqa: E402
from toolkit.lab.attention_maps import attention_maps, attention_picture  # noqa: E402
from toolkit.lab.data import load_digits_split  # noqa: E402
from toolkit.plot.attention_maps_figure import matrix_limits  # noqa: E402


@pytest.fixture(scope="module")
def image():
    return load_digits_split().x_test[3]  # (1, 8, 8)


def _model(activation="softmax", seed=0):
    torch.manual_seed(seed)
    return ViT(activation, dim=16, heads=2).eval()


@torch.no_grad()
def _scores_by_hand(model, image, layer, head):
    """S = q kᵀ / √d of one head, from the block's own weights: tokens, the blocks below, LayerNorm, qkv."""
    x = image[None].float()
    w, b = model.patch_embed.weight, model.patch_embed.bias  # (dim, 1, 2, 2)
    patches = x.unfold(2, 2, 2).unfold(3, 2, 2).reshape(4 * 4, 4)  # row by row, each 2x2 flattened
    tokens = patches @ w.reshape(w.shape[0], 4).T + b
    h = torch.cat([model.cls_token[0], tokens]) + model.pos_embed[0]  # (17, dim)
    for block in model.blocks[:layer]:
        h = block(h[None])[0]
    blk = model.blocks[layer]
    qkv = blk.attn.qkv(blk.norm1(h))  # (17, 3 * dim)
    d_model = h.shape[-1]
    d = d_model // blk.attn.heads
    q = qkv[:, :d_model][:, head * d:(head + 1) * d].double()
    k = qkv[:, d_model:2 * d_model][:, head * d:(head + 1) * d].double()
    return q @ k.T / math.sqrt(d)


def test_each_row_is_the_activation_of_scores_recomputed_from_q_and_k(image):
    model = _model()
    maps = attention_maps(model, image, layer=4, head=1)
    s = _scores_by_hand(model, image, 4, 1)
    assert sorted(maps.matrices) == ["softmax", "x/1", "x³/16"] and maps.shared_scores
    np.testing.assert_allclose(maps.scores["softmax"], s.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(maps.matrices["softmax"], torch.softmax(s, -1).numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(maps.matrices["x/1"], s.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(maps.matrices["x³/16"], (s ** 3 / 16).numpy(), rtol=1e-3, atol=1e-7)
    np.testing.assert_allclose(maps.row_sums()["softmax"], np.ones(17), rtol=1e-12)
    assert maps.norms()["x/1"] == pytest.approx(float(torch.linalg.matrix_norm(s)), rel=1e-4)
    assert maps.norms()["softmax"] <= math.sqrt(17)
    assert (maps.matrices["x/1"] < 0).any()  # a polynomial keeps the sign of the scores


def test_each_activations_own_model_gives_its_own_scores(image):
    models = {"softmax": _model("softmax"), "x³/16": _model("x³/16", seed=1)}
    maps = attention_maps(models, image, layer=2, head=0)
    assert not maps.shared_scores and sorted(maps.matrices) == ["softmax", "x³/16"]
    s = _scores_by_hand(models["x³/16"], image, 2, 0)
    np.testing.assert_allclose(maps.matrices["x³/16"], (s ** 3 / 16).numpy(), rtol=1e-3, atol=1e-7)
    assert not np.allclose(maps.scores["softmax"], maps.scores["x³/16"])


def test_patch_tokens_are_numbered_as_the_model_orders_them(image):
    model = _model()
    maps = attention_maps(model, image)
    np.testing.assert_array_equal(maps.patch_tokens, np.arange(1, 17).reshape(4, 4))
    assert maps.num_tokens == 17 and maps.patch_size == 2
    embedded = model.patch_embed(image[None]).flatten(2).transpose(1, 2)[0]  # (16, dim): token t = row t - 1
    w, b = model.patch_embed.weight, model.patch_embed.bias
    for (r, c), token in np.ndenumerate(maps.patch_tokens):
        pixels = torch.as_tensor(maps.image[2 * r:2 * r + 2, 2 * c:2 * c + 2], dtype=torch.float32)
        want = (w[:, 0] * pixels).sum(dim=(1, 2)) + b
        torch.testing.assert_close(embedded[token - 1], want, rtol=1e-5, atol=1e-6)


def test_picture_draws_the_patches_and_one_matrix_per_activation(image):
    fig = attention_picture(_model(), image, layer=1, head=0)
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(axes) == 4
    assert sorted(int(t.get_text()) for t in axes[0].texts) == list(range(1, 17))  # every patch labelled
    assert [ax.get_title().split("\n")[0] for ax in axes[1:]] == ["softmax", "x/1", "x³/16"]
    lo, hi = axes[2].images[0].get_clim()
    assert lo == -hi < 0  # a signed matrix: white at 0, as far on both sides
    assert axes[1].images[0].get_clim()[0] == 0.0  # softmax: a share, from 0
    assert "every row sums to 1" in axes[1].get_title()
    plt.close(fig)
    assert matrix_limits(np.array([[0.2, 0.5], [0.1, 0.3]])) == (0.0, 0.5, "sequential")
    assert matrix_limits(np.array([[-2.0, 0.5]])) == (-2.0, 2.0, "diverging")


def test_a_layer_or_head_the_model_lacks_is_refused(image):
    with pytest.raises(InvalidOptionError, match="layer"):
        attention_maps(_model(), image, layer=12)
    with pytest.raises(InvalidOptionError, match="head"):
        attention_maps(_model(), image, head=2)
    with pytest.raises(InvalidOptionError, match="one image"):
        attention_maps(_model(), torch.zeros(2, 1, 8, 8))
