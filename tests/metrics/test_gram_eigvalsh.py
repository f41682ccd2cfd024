"""The eigensolver behind every spectrum: NumPy's and torch's LAPACK routes give the same eigenvalues."""

import numpy as np
import pytest
import torch

from toolkit.metrics import gram


def _known_spectrum(k, seed):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((k, k)))
    lam = np.sort(np.concatenate([rng.uniform(0, 1, k - 3), [0.0, 0.0, 50.0]]))  # a zero pair and a spike
    return (q * lam) @ q.T, lam


@pytest.mark.parametrize("k", [1, 7, 300, gram.NUMPY_EIGVALSH_MAX + 1])
@pytest.mark.parametrize("threads", [1, 2])
def test_both_routes_give_the_known_spectrum_from_the_lower_triangle(k, threads):
    g, lam = _known_spectrum(max(k, 4), k)
    g = np.tril(g) + np.triu(np.full_like(g, np.nan), 1)  # only the lower triangle may be read
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = gram._eigvalsh(g)
    finally:
        torch.set_num_threads(before)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), lam, rtol=0, atol=64 * np.finfo(float).eps * lam.max() * len(lam))
    np.testing.assert_allclose(got.numpy(), np.linalg.eigvalsh(np.tril(np.nan_to_num(g))), rtol=0,
                               atol=64 * np.finfo(float).eps * lam.max() * len(lam))


def test_numpy_route_is_taken_only_where_it_was_measured_faster(monkeypatch):
    calls = []
    real = np.linalg.eigvalsh
    monkeypatch.setattr(gram.np.linalg, "eigvalsh", lambda a, UPLO="L": calls.append(a.shape) or real(a, UPLO))
    g, _ = _known_spectrum(20, 0)
    big, _ = _known_spectrum(gram.NUMPY_EIGVALSH_MAX + 1, 1)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):  # the route never depends on the threads a call is given
            torch.set_num_threads(threads)
            gram._eigvalsh(g)
        gram._eigvalsh(g.astype(np.float32))  # float32: torch's ssyevd
        gram._eigvalsh(big)  # a larger order: torch's (MKL's) syevd
    finally:
        torch.set_num_threads(before)
    assert calls == [(20, 20), (20, 20)]


def test_a_spectrum_is_the_same_bit_for_bit_on_one_thread_and_on_two():
    """A cell measured alone (every thread) equals the same cell measured in a pass (one thread per pipeline)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1536, 576))
    g = x.T @ x
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with threadpool_limits(threads, user_api="blas"):
                got.append(gram._eigvalsh(g).numpy().copy())
    finally:
        torch.set_num_threads(before)
    assert np.array_equal(got[0], got[1])



@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("view", ["reversed", "every other", "transposed"])
def test_both_routes_take_a_strided_view(threads, view):
    g, lam = _known_spectrum(14, 3)
    g = {"reversed": g[::-1, ::-1],  # P G P^T: the same spectrum, negative strides
         "every other": g[::2, ::2], "transposed": g.T}[view]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = gram._eigvalsh(g)  # the torch route (2 threads) raised ValueError on negative strides
    finally:
        torch.set_num_threads(before)
    ref = np.linalg.eigvalsh(np.ascontiguousarray(g))
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=64 * np.finfo(float).eps * np.abs(ref).max() * 14)
    if view != "every other":
        np.testing.assert_allclose(got.numpy(), lam, rtol=0, atol=64 * np.finfo(float).eps * lam.max() * 14)
