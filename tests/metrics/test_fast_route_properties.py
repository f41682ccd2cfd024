"""The spectral fast routes against their exact routes, on inputs built to defeat them (issue 42; howto,
"Proving a fast route against its exact one"). Oracles: NumPy's float64 SVD, SciPy's ``eigvalsh``, a
brute-force O(N^2) KS scan, the float64 route. Tolerances: each route's stated bound.

- the Gram route of ``singular_values`` and the streaming Gram of ``difference_singular_values``:
  :math:`|\\hat\\sigma_i^2 - \\sigma_i^2| \\le 4(m + n)\\,\\epsilon_{64}\\,\\sigma_1^2` (the worst case of
  ``singular_values``' Notes: the product's and the eigensolver's; values below the floor set to 0
  included; an 8 x 8 matrix of clustered values reached 38 eps);
- ``_eigvalsh`` (NumPy's LAPACK for float64 up to order 1536, torch's otherwise):
  :math:`64\\,k\\,\\epsilon\\,\\lambda_{max}` (``test_gram_eigvalsh``);
- the pruned xmin search of ``fit_power_law``: the exact argmin of WeightWatcher's KS distance (ties within
  rounding allowed);
- ``precision="float32-certified"``: a cell served in float32 is within ``certificate.TOLERANCES`` of float64.

Families: multiplicities, rank below the side, clustered values, shared singular vectors with rescaled values,
low-rank updates, scales 1e-30..1e30 (float32) and 1e-300..1e300 (float64, subnormal and overflowing Gram
matrices).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_float32_certified import SERVABLE, _assert_within_tolerances

from toolkit.metrics.certificate import FLOAT32
from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.gram import _eigvalsh
from toolkit.metrics.powerlaw import fit_power_law
from toolkit.metrics.registry import DegenerateMatrix, resolve_metrics
from toolkit.metrics.spectral import difference_singular_values, singular_values

EPS64 = np.finfo(np.float64).eps
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
pytestmark = pytest.mark.usefixtures("one_thread")
SPECTRA = ("multiplicity", "rank_below", "clustered", "power_law", "two_values")


def spectrum(family: str, d: int, rng) -> np.ndarray:
    s = np.sort(np.arange(1, d + 1) ** -1.0 * rng.uniform(0.5, 1.5, d))[::-1]
    if family == "multiplicity":
        j = int(rng.integers(0, max(1, d - 3)))
        s[j:j + 4] = s[j]
    elif family == "rank_below":
        s[int(rng.integers(1, d)):] = 0.0
    elif family == "clustered":
        s = 1.0 + 10.0 ** rng.uniform(-12, -2) * rng.standard_normal(d)
    elif family == "two_values":
        s = np.where(np.arange(d) < d // 2, 2.0, 1.0)
    return np.sort(np.abs(s))[::-1]


def matrix(s: np.ndarray, m: int, n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = np.linalg.qr(rng.standard_normal((m, s.size)))[0]
    v = np.linalg.qr(rng.standard_normal((n, s.size)))[0]
    return (u * s) @ v.T, u, v


def within_gram_bound(got: np.ndarray, want: np.ndarray, shape) -> None:
    """|got_i^2 - want_i^2| <= 4 (m + n) eps64 want_1^2, in units of want_1 (1e160^2 overflows)."""
    g, w = got / want[0], want / want[0]
    err = np.abs(g * g - w * w).max()
    assert err <= 4 * sum(shape) * EPS64, err


cases = (st.sampled_from(SPECTRA), st.integers(8, 70), st.integers(8, 70), st.integers(0, 2 ** 32 - 1),
         st.sampled_from([torch.float64, torch.float32]))


@SETTINGS
@given(*cases, st.integers(-30, 30), st.booleans())
def test_gram_singular_values_against_svd(family, m, n, seed, dtype, scale_exp, extreme):
    rng = np.random.default_rng(seed)
    w, _, _ = matrix(spectrum(family, min(m, n), rng), m, n, rng)
    if extreme and dtype == torch.float64:
        scale_exp *= 10  # 1e-300 .. 1e300: subnormal and overflowing Gram matrices
    wt = torch.from_numpy(w * 10.0 ** scale_exp).to(dtype)
    want = np.linalg.svd(wt.double().numpy(), compute_uv=False)
    within_gram_bound(singular_values(wt, method="gram").numpy(), want, (m, n))
    within_gram_bound(singular_values(wt).numpy(), want, (m, n))


@SETTINGS
@given(*cases, st.sampled_from(["rescaled", "low_rank", "sparse", "identical_but_one"]), st.integers(-30, 30))
def test_streaming_difference_gram_against_svd(family, m, n, seed, dtype, update, scale_exp):
    rng = np.random.default_rng(seed)
    s = spectrum(family, min(m, n), rng)
    base, u, v = matrix(s, m, n, rng)
    if update == "rescaled":  # an SVD-style fine-tune: same U, V, values times 0.5 .. 2
        target = (u * (s * rng.uniform(0.5, 2.0, s.size))) @ v.T
    elif update == "low_rank":
        target = base + np.outer(rng.standard_normal(m), rng.standard_normal(n)) * 1e-3
    elif update == "sparse":
        target = base + (rng.random((m, n)) < 0.05) * rng.standard_normal((m, n))
    else:
        target = base.copy()
        target[0, 0] += 1.0
    scale = 10.0 ** (scale_exp * (10 if dtype == torch.float64 else 1))
    b, t = (torch.from_numpy(x * scale).to(dtype) for x in (base, target))
    want = np.linalg.svd(t.double().numpy() - b.double().numpy(), compute_uv=False)
    if want[0] == 0:
        return  # the rounding to float32 erased the update
    within_gram_bound(difference_singular_values(b, t).numpy(), want, (m, n))


@SETTINGS
@given(st.sampled_from(SPECTRA), st.integers(2, 90), st.integers(0, 2 ** 32 - 1), st.sampled_from([64, 32]),
       st.integers(-30, 30))
def test_eigvalsh_routes_against_scipy(family, k, seed, bits, scale_exp):
    """Both routes of ``_eigvalsh``: NumPy's (float64) and torch's (float32, and every order above 1536)."""
    rng = np.random.default_rng(seed)
    w, _, _ = matrix(spectrum(family, k, rng), k, k + 5, rng)
    g = (w @ w.T) * 10.0 ** scale_exp
    g = g.astype(np.float32 if bits == 32 else np.float64)
    want = scipy.linalg.eigvalsh(g.astype(np.float64))
    eps = np.finfo(g.dtype).eps
    got = _eigvalsh(g).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * k * eps * np.abs(want).max())


def brute_force_scores(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """WeightWatcher's fit by the O(N^2) scan: for every candidate xmin x_i (i < N - 1), alpha by the MLE
    (Clauset et al. 2009, eq. 3.1) and D = max_t |1 - (x_{i+t}/x_i)^(1-alpha) - t/n| (D = 1 where
    alpha <= 1)."""
    alphas, ds = np.full(x.size - 1, np.nan), np.ones(x.size - 1)
    for i in range(x.size - 1):
        tail = x[i:]
        n = tail.size
        total = np.log(tail / x[i]).sum()
        alphas[i] = alpha = 1 + n / total if total > 0 else math.inf
        if alpha > 1:
            with np.errstate(over="ignore", invalid="ignore"):
                ds[i] = np.abs(1 - (tail / x[i]) ** (1 - alpha) - np.arange(n) / n).max()
    return alphas, ds


@SETTINGS
@given(st.sampled_from(["pareto", "ties", "spikes", "bulk", "clustered"]), st.integers(20, 400),
       st.integers(0, 2 ** 32 - 1), st.integers(-30, 30))
def test_pruned_xmin_search_against_the_full_scan(family, size, seed, scale_exp):
    """The chosen xmin is the full scan's argmin of D, up to the rounding of D itself (measured as the two
    computations' difference at the chosen candidate: alpha ~ 1e6 on a clustered tail is known to 1e-9)."""
    rng = np.random.default_rng(seed)
    x = rng.pareto(rng.uniform(1.0, 4.0), size) + 1.0
    if family == "ties":  # many repeated values: equal candidates
        x = np.round(x, 1)
    elif family == "spikes":
        x[: size // 10] *= 100.0
    elif family == "bulk":
        x = rng.uniform(1.0, 1.5, size)
    elif family == "clustered":
        x = 1.0 + 10.0 ** rng.uniform(-8, -3) * rng.random(size)
    x = np.sort(x) * 10.0 ** scale_exp
    try:
        fit = fit_power_law(x, threshold=0.0)
    except DegenerateMatrix:
        return  # a flat tail: no power law (flat_reason)
    alphas, ds = brute_force_scores(x)
    i = x.size - fit.num_tail  # the candidate position (ties: tails of different sizes)
    rounding = abs(fit.ks_distance - ds[i]) + abs(fit.alpha - alphas[i]) / alphas[i]
    assert rounding <= 1e-6
    assert ds[i] <= ds.min() + 2 * rounding + 1e-9 * ds.min() + 1e-12, (ds[i], ds.min(), int(np.argmin(ds)), i)


@settings(SETTINGS, max_examples=12)
@given(st.sampled_from(SPECTRA), st.integers(0, 2 ** 32 - 1), st.integers(-20, 20))
def test_float32_certified_cells_against_float64(family, seed, scale_exp):
    rng = np.random.default_rng(seed)
    w, _, _ = matrix(spectrum(family, 60, rng) * 10.0 ** scale_exp, 90, 60, rng)
    wt = torch.from_numpy(w).to(torch.float32)
    metrics = resolve_metrics(SERVABLE, kind="weight")
    r32 = evaluate_matrix(wt, metrics, precision="float32-certified")
    r64 = evaluate_matrix(wt, metrics)
    if r32.precision_served == FLOAT32:
        _assert_within_tolerances(r32.values, r64.values, float(singular_values(wt)[0]) ** 2)
    else:
        names = sorted(r64.values)  # served in float64: the float64 route's values (NaN where it has NaN)
        np.testing.assert_array_equal([r32.values[k] for k in names], [r64.values[k] for k in names])


@pytest.mark.parametrize("scale", [1e-300, 1e-160, 1e160, 1e300])
def test_float64_matrices_whose_gram_leaves_float64s_range(scale):
    """Entries of 1e-160 made a subnormal Gram matrix (singular values 2e-5 off, relative); entries of 1e160
    an infinite one (reported as NaN/Inf entries). Scaled by a power of two first (gram.gram_scale)."""
    rng = np.random.default_rng(1)
    base = rng.standard_normal((20, 30)) * scale
    target = base + rng.standard_normal((20, 30)) * scale
    want = np.linalg.svd(target, compute_uv=False)
    within_gram_bound(singular_values(torch.from_numpy(target), method="gram").numpy(), want, (20, 30))
    want = np.linalg.svd(target - base, compute_uv=False)
    within_gram_bound(difference_singular_values(torch.from_numpy(base), torch.from_numpy(target)).numpy(), want,
                      (20, 30))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["multiplicity", "clustered", "two_values"])
def test_torch_eigvalsh_route_above_numpys_orders(family):
    """float64 orders above NUMPY_EIGVALSH_MAX go to torch's LAPACK: same bound against SciPy."""
    from toolkit.metrics.gram import NUMPY_EIGVALSH_MAX

    k = NUMPY_EIGVALSH_MAX + 64
    rng = np.random.default_rng(5)
    q = np.linalg.qr(rng.standard_normal((k, k)))[0]
    g = (q * spectrum(family, k, rng) ** 2) @ q.T
    want = scipy.linalg.eigvalsh(g)
    np.testing.assert_allclose(_eigvalsh(g).numpy(), want, rtol=0, atol=64 * k * EPS64 * np.abs(want).max())
