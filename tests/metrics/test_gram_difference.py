"""The Gram route of ΔW = T - B (issue 38): block-wise, in place, against NumPy in float64.

``difference_singular_values`` sums the Gram matrix of the difference over float64 blocks of both stored
sides (subtracted in a second reused buffer, added into one triangle of the sum by ``dsyrk``): its singular
values must be NumPy's SVD of the float64 difference, over one block and many, for wide and tall pairs and
for the degenerate updates (zero, rank one, one changed entry), with mixed storage dtypes too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolkit.metrics import gram
from toolkit.metrics.registry import DegenerateMatrix
from toolkit.metrics.spectral import difference_singular_values


def pair(shape, kind: str, dtype=torch.bfloat16, seed: int = 3):
    """(base, target) stored in ``dtype``; the exact updates ("zero", "rank_one", "one_entry") are stored
    exactly: multiples of 1/16 below 1 on a base of such multiples (bf16 holds them all)."""
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    if kind == "sparse":
        base = (torch.randn(shape, generator=g) * 0.02).to(dtype)
    else:
        base = (torch.randint(-8, 9, shape, generator=g) / 16).to(dtype)
    if kind == "zero":
        update = torch.zeros(shape)
    elif kind == "rank_one":
        sign = torch.randint(0, 2, (m,), generator=g) * 2 - 1
        update = torch.outer(sign.double(), torch.randint(-2, 3, (n,), generator=g).double()) / 16
    elif kind == "one_entry":
        update = torch.zeros(shape)
        update[m // 2, n // 3] = 0.5
    else:  # a sparse dense-rank update, as a fine-tune's
        update = (torch.rand(shape, generator=g) < 0.1) * torch.randn(shape, generator=g) * 1e-3
    target = (base.double() + update.double()).to(dtype)
    if kind != "sparse":
        assert torch.equal(target.double() - base.double(), update.double())  # stored exactly
    return base, target


def numpy_singular_values(base, target) -> np.ndarray:
    return np.linalg.svd(target.double().numpy() - base.double().numpy(), compute_uv=False)


@pytest.fixture(params=["one block", "many blocks", "many tiles"])
def blocks(request, monkeypatch):
    if request.param == "many blocks":  # a few columns or rows a block: the sum runs over many products
        monkeypatch.setattr(gram, "PAIR_BLOCK", 3 * 97)
    if request.param == "many tiles":  # the Gram matrix summed in tiles of at most 16 x 16 (uneven at 97)
        monkeypatch.setattr(gram, "GRAM_TILE", 16)
    return request.param


@pytest.mark.parametrize("shape", [(97, 260), (260, 97), (64, 64)])
@pytest.mark.parametrize("kind", ["sparse", "rank_one", "one_entry"])
def test_difference_singular_values_match_numpy(shape, kind, blocks):
    base, target = pair(shape, kind)
    want = numpy_singular_values(base, target)
    got = difference_singular_values(base, target).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-7 * want[0])
    if kind != "sparse":  # rank one: one singular value, the rest resolved to zero (the Gram route's floor)
        assert got[0] == pytest.approx(want[0], rel=1e-12)
        assert np.count_nonzero(got) == 1


@pytest.mark.parametrize("shape", [(97, 260), (260, 97)])
def test_zero_update_has_zero_spectrum(shape, blocks):
    base, target = pair(shape, "zero")
    assert torch.equal(base, target)
    assert not difference_singular_values(base, target).any()


def test_mixed_storage_dtypes_subtract_in_float64(blocks):
    base, _ = pair((120, 75), "sparse", dtype=torch.bfloat16)
    target = base.float() + torch.randn(120, 75, generator=torch.Generator().manual_seed(4)) * 1e-5  # float32
    want = numpy_singular_values(base, target)
    np.testing.assert_allclose(difference_singular_values(base, target).numpy(), want, rtol=1e-9)


def test_gram_of_the_difference_equals_numpy_in_the_lower_triangle(blocks):
    """The sum ``_syrk_into`` builds: the lower triangle is (T - B)(T - B)ᵀ; above it only the diagonal tiles'
    own entries are written (the same sums), the rest is untouched (zero)."""
    for shape in [(40, 150), (150, 40)]:
        base, target = pair(shape, "sparse", dtype=torch.float32)
        d = target.double().numpy() - base.double().numpy()
        wide, k = gram.gram_side(target)
        want = d @ d.T if wide else d.T @ d
        g = np.zeros((k, k))
        for x in gram.float64_blocks(target, "block", base):
            gram._syrk_into(g, x, wide)
        np.testing.assert_allclose(np.tril(g), np.tril(want), rtol=1e-12, atol=1e-15 * np.abs(want).max())
        upper, side = np.triu(g, 1), -(-k // -(-k // gram.GRAM_TILE))
        tile = np.arange(k) // side
        assert not upper[tile[:, None] != tile[None, :]].any()
        np.testing.assert_allclose(upper, np.triu(want, 1) * (tile[:, None] == tile[None, :]), rtol=1e-12,
                                   atol=1e-15 * np.abs(want).max())


def test_difference_blocks_reuse_two_buffers(blocks):
    base, target = pair((50, 300), "sparse")
    d = target.double().numpy() - base.double().numpy()
    got, addresses = [], set()
    with gram.reuse_buffers():
        for x in gram.float64_blocks(target, "block", base, entries=50 * 40):
            got.append(x.copy())
            addresses.add(x.__array_interface__["data"][0])
    assert len(got) == 8 and len(addresses) == 1  # every block a view of one buffer
    np.testing.assert_array_equal(np.hstack(got), d)


def test_nonfinite_difference_is_degenerate():
    base, target = pair((30, 40), "sparse", dtype=torch.float32)
    target[2, 3] = float("inf")
    with pytest.raises(DegenerateMatrix, match="NaN/Inf"):
        difference_singular_values(base, target)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("shape", [(40, 150), (150, 40)])
def test_non_finite_entries_are_a_reason_not_a_warning(shape, blocks):
    """NaN and Inf entries reach the tiled products; NumPy's floating-point warnings from them are not shown,
    and the pair is DegenerateMatrix with the count (a RuntimeWarning here would fail under ``error``)."""
    base, target = pair(shape, "sparse", dtype=torch.float32)
    target[3, 5], target[7, 9] = float("inf"), float("nan")
    with pytest.raises(DegenerateMatrix, match=r"NaN/Inf \(2 entries\)"):
        difference_singular_values(base, target)
