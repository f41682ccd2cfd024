"""alpha_farms: the fit of the pooled ESD of square blocks, against numpy's eigenvalues of the blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from toolkit.metrics.farms import alpha_farms, farms_blocks, farms_eigenvalues
from toolkit.metrics.powerlaw import alpha, fit_power_law
from toolkit.metrics.spectral import singular_values


def test_blocks_cover_every_row_once_but_the_last_overlap():
    assert farms_blocks((8, 4)) == [slice(0, 4), slice(4, 8)]
    assert farms_blocks((10, 4)) == [slice(0, 4), slice(4, 8), slice(6, 10)]
    assert farms_blocks((4, 4)) == [slice(0, 4)]
    with pytest.raises(ValueError, match="longer side first"):
        farms_blocks((3, 4))


def test_pooled_eigenvalues_and_fit_are_numpys():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(70, 300, generator=g, dtype=torch.float64)  # wide: taken transposed, 300 x 70
    x = w.T.numpy()
    want = np.concatenate([np.linalg.eigvalsh(x[r].T @ x[r])[::-1] for r in farms_blocks((300, 70))])
    got = farms_eigenvalues(w)
    assert got.shape == (5 * 70,)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * want.max())
    assert alpha_farms(w) == pytest.approx(fit_power_law(want).alpha, rel=1e-9)


def test_a_square_matrix_is_its_own_block():
    w = torch.randn(96, 96, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert alpha_farms(w) == pytest.approx(alpha(w, singular_values(w)), rel=1e-12)
