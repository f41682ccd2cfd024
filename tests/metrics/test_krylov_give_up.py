"""When the block Krylov route gives up early (issue 42: a plain Gaussian base made it read the matrix 16 times
before the exact route took over), and that giving up never changes a value."""

import numpy as np
import pytest
import torch

from toolkit.metrics import krylov, subspace


@pytest.mark.parametrize(("previous", "residual", "gap", "left", "hopeless"), [
    (4.9, 3.3, 0.036, 13, True),   # Qwen2.5-7B-shaped Gaussian q_proj, 3rd application: needs ~44 more, has 13
    (72.0, 20.0, 0.56, 13, False),  # the spiked pair's q_proj, 3rd application: needs ~13 more
    (2.4, 2.4, 0.5, 13, True),     # not shrinking
    (3.0, 2.0, 0.0, 13, True),     # no gap between theta_k and theta_k+1
    (np.inf, 2.0, 0.5, 13, False),  # no rate yet
    (1e-5, 1e-9, 0.5, 1, False),   # already below tolerance x gap
])
def test_slow_residual_on_numbers(previous, residual, gap, left, hopeless):
    """need = residual / (2.5e-6 gap) applications at the last rate previous / residual, against 2 x left:
    e.g. 3.3 / (2.5e-6 x 0.036) = 3.7e7, log(3.7e7) / log(4.9 / 3.3) = 44 > 26."""
    assert krylov._slow_residual(previous, residual, gap, 2.5e-6, left) is hopeless


def test_a_gaussian_matrix_goes_to_the_exact_route_after_three_reads(monkeypatch):
    """A 800 x 1600 Gaussian matrix (top of the spectrum at the Marchenko-Pastur edge, no clear gap at k = 16;
    the Krylov space cannot fill its 800 dimensions in 16 reads): the route stops reading after RATE_FROM
    applications, and top_left's subspace is the exact route's."""
    w = torch.from_numpy(np.random.default_rng(3).standard_normal((800, 1600)) * 0.02)
    reads = []
    real = krylov.gram_apply
    monkeypatch.setattr(krylov, "gram_apply", lambda *a, **kw: reads.append(1) or real(*a, **kw))
    assert krylov.krylov_top(w, 16) is None
    assert len(reads) == krylov.RATE_FROM
    got, want = subspace.top_left(w, 16).numpy(), subspace.exact_top_left(w, 16).numpy()
    u = np.linalg.svd(w.numpy(), full_matrices=False)[0][:, :16]
    assert float(((got.T @ want) ** 2).sum()) / 16 == pytest.approx(1.0, abs=1e-10)
    assert float(((got.T @ u) ** 2).sum()) / 16 == pytest.approx(1.0, abs=1e-8)


def test_a_spiked_matrix_still_takes_the_krylov_route():
    """The same noise plus 24 spikes above its edge (as benchmarks/bench_compare.py's spiked base): the residual
    shrinks fast, the route answers and agrees with the SVD."""
    rng = np.random.default_rng(4)
    m, n = 800, 1600
    edge = 0.02 * (m ** 0.5 + n ** 0.5)
    s = edge * (1 + 4 * np.arange(1, 25) ** -0.5)
    w = rng.standard_normal((m, n)) * 0.02 + (rng.standard_normal((m, 24)) / m ** 0.5 * s) @ (
        rng.standard_normal((n, 24)) / n ** 0.5).T
    found = krylov.krylov_top(torch.from_numpy(w), 16)
    assert found is not None and found.applications <= 12
    u = np.linalg.svd(w, full_matrices=False)[0][:, :16]
    assert float(((found.vectors.T @ u) ** 2).sum()) / 16 == pytest.approx(1.0, abs=1e-10)
