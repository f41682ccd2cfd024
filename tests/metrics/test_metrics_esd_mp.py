"""Opt-in ESD metrics: the Marchenko-Pastur fit (mp_softrank, mp_num_spikes, mp_bulk_max) and the
element-shuffled spectrum (rand_distance, rand_num_spikes)."""

import math

import numpy as np
import pytest
import scipy.spatial.distance
import scipy.stats
import torch
from sklearn.neighbors import KernelDensity

from toolkit.metrics import compute_weight_metrics, get_metric, list_metrics, resolve_metrics
from toolkit.metrics import correlation_traps as ct
from toolkit.metrics import marchenko_pastur as mp

OPT_IN = ["mp_softrank", "mp_num_spikes", "mp_bulk_max", "rand_distance", "rand_num_spikes"]


def gaussian(m, n, seed=0, scale=1.0):
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


def eig(w):
    return np.linalg.svd(w.double().numpy(), compute_uv=False) ** 2


def test_linear_kde_equals_sklearn():
    rng = np.random.default_rng(0)
    data = rng.gamma(2.0, 0.5, size=700)
    points = np.linspace(0, data.max() + 0.5, 1000)
    ref = np.exp(KernelDensity(kernel="linear", bandwidth=0.1).fit(data[:, None]).score_samples(points[:, None]))
    assert np.allclose(mp.linear_kde(data, points, 0.1), ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape", [(400, 1000), (1000, 250), (300, 300)])
def test_random_matrix_bulk_edge_is_marchenko_pastur(shape):
    # i.i.d. N(0, s^2) entries: the eigenvalues of W^T W fill [s^2 (sqrt N - sqrt M)^2, s^2 (sqrt N + sqrt M)^2].
    m, n = shape
    w = gaussian(m, n, scale=0.02)
    fit = mp.fit_marchenko_pastur(eig(w), m, n)
    big, small = max(m, n), min(m, n)
    edge = 0.02 ** 2 * (math.sqrt(big) + math.sqrt(small)) ** 2
    assert fit.bulk_max == pytest.approx(edge, rel=0.08)
    assert fit.softrank == pytest.approx(1.0, abs=0.1)
    assert fit.num_spikes == 0
    scaled = mp.fit_marchenko_pastur(eig(w) * 1e4, m, n)  # scale-free apart from the units of bulk_max
    assert scaled.softrank == pytest.approx(fit.softrank, rel=1e-9)
    assert scaled.bulk_max == pytest.approx(fit.bulk_max * 1e4, rel=1e-9)
    assert scaled.num_spikes == fit.num_spikes


def test_planted_spikes_are_counted():
    # Signal + noise: three strong rank-one directions stand far beyond the bulk.
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(300, 800, generator=g, dtype=torch.float64)
    u = torch.linalg.qr(torch.randn(300, 3, generator=g, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(800, 3, generator=g, dtype=torch.float64))[0]
    w = noise + u @ torch.diag(torch.tensor([300.0, 200.0, 120.0], dtype=torch.float64)) @ v.T
    got = {k: x.value for k, x in compute_weight_metrics(w, OPT_IN[:3]).items()}
    s = torch.tensor(np.sqrt(eig(w)))
    direct = mp.shared_mp_fit(w, s)
    assert direct.num_spikes == 3
    lam_max = float(s[0]) ** 2
    assert direct.softrank == pytest.approx(direct.bulk_max / lam_max, rel=1e-12) and direct.softrank < 0.05
    assert direct.bulk_max == pytest.approx((math.sqrt(800) + math.sqrt(300)) ** 2, rel=0.1)
    assert got == {"mp_softrank": pytest.approx(direct.softrank, rel=1e-6), "mp_num_spikes": 3,
                   "mp_bulk_max": pytest.approx(direct.bulk_max, rel=1e-6)}


def test_fit_is_the_least_squares_minimum():
    # The polished sigma scores no worse than any grid point around it.
    w = gaussian(200, 500, seed=3)
    lam = eig(w)
    fit = mp.fit_marchenko_pastur(lam, 200, 500)
    x = np.sort(lam) * lam.size / lam.sum()
    grid = np.linspace(0, x.max() + 0.5, 1000)
    dens = mp.linear_kde(x, grid, 0.1)
    xs, ys = grid[dens > 0.01], dens[dens > 0.01]

    def score(sigma):
        rho, _, _ = mp._mp_density(xs, 2.5, sigma)
        return float(np.sum((rho - ys) ** 2))

    best = score(fit.sigma)
    assert all(best <= score(fit.sigma * f) + 1e-12 for f in (0.9, 0.97, 0.99, 1.01, 1.03, 1.1))


def test_mp_degenerate():
    with pytest.raises(mp.DegenerateMatrix, match="all-zero"):
        mp.fit_marchenko_pastur(np.zeros(20), 20, 30)


def test_jensen_shannon_equals_scipy():
    rng = np.random.default_rng(2)
    p, q = np.sort(rng.gamma(2, size=50)), np.sort(rng.gamma(3, size=50))
    q_same = q * (p.sum() / q.sum())  # equal sums (a shuffle keeps ||W||_F): SciPy's distance
    assert ct.jensen_shannon_distance(p, q_same) == pytest.approx(
        scipy.spatial.distance.jensenshannon(p, q_same), rel=1e-12)
    m = (p + q) / 2  # otherwise the midpoint is of the raw vectors, normalised (scipy.stats.entropy normalises)
    ref = math.sqrt((scipy.stats.entropy(p, m) + scipy.stats.entropy(q, m)) / 2)
    assert ct.jensen_shannon_distance(p, q) == pytest.approx(ref, rel=1e-12)
    assert ct.jensen_shannon_distance(p, p) == pytest.approx(0.0, abs=1e-7)


def test_shuffle_is_seeded_and_keeps_the_entries():
    w = gaussian(60, 90, seed=4).float()
    a = ct.shuffled_eigenvalues(w, seed=7, replicas=2)
    assert a.shape == (2, 60)
    assert np.array_equal(a, ct.shuffled_eigenvalues(w, seed=7, replicas=2))
    assert not np.allclose(a[0], a[1]) and not np.allclose(a[0], ct.shuffled_eigenvalues(w, seed=8)[0])
    frob = float((w.double() ** 2).sum())
    assert np.allclose(a.sum(axis=1), frob, rtol=1e-9)  # a permutation keeps ||W||_F


def test_rand_metrics_on_structured_and_random_matrices():
    # A low-rank-plus-noise matrix is far from its shuffle; an i.i.d. one is close to it.
    g = torch.Generator().manual_seed(6)
    structured = (torch.randn(150, 4, generator=g) @ torch.randn(4, 300, generator=g)) + 0.1 * torch.randn(
        150, 300, generator=g)
    noise = gaussian(150, 300, seed=6).float()
    d_struct = ct.rand_distance(structured, torch.tensor(np.sqrt(eig(structured))))
    d_noise = ct.rand_distance(noise, torch.tensor(np.sqrt(eig(noise))))
    assert d_struct > 0.3 > 0.05 > d_noise
    # Independent reference: the same seeded shuffle, NumPy SVD, SciPy's Jensen-Shannon distance.
    perm = np.random.default_rng((0, 0)).permutation(noise.numel())
    shuffled = noise.reshape(-1)[torch.from_numpy(perm)].reshape(noise.shape)
    ref = scipy.spatial.distance.jensenshannon(np.sort(eig(noise)), np.sort(eig(shuffled)))
    assert d_noise == pytest.approx(ref, rel=1e-6)
    assert ct.rand_num_spikes(noise, None) == 0


def test_correlation_trap_from_a_few_huge_entries():
    # Heavy-tailed entries survive the shuffle as spikes of the shuffled spectrum.
    w = gaussian(200, 400, seed=8).float()
    w.view(-1)[torch.arange(0, w.numel(), 9000)] = 60.0
    assert ct.rand_num_spikes(w, None) >= 3
    small = gaussian(40, 90, seed=9).float()  # min side < 100: 5 pooled shuffles
    assert ct.rand_num_spikes(small, None) == 0
    assert ct._SPECTRA.of(small)[("shuffled", 0, 5)][0].shape == (5, 40)


def test_opt_in_not_computed_by_default_but_by_name():
    defaults = list_metrics()
    assert not set(OPT_IN) & set(defaults)
    assert set(OPT_IN) <= set(list_metrics(opt_in=True))
    assert not set(OPT_IN) & {m.name for m in resolve_metrics(None)}
    assert [m.name for m in resolve_metrics(OPT_IN)] == OPT_IN
    w = gaussian(50, 120, seed=10).float()
    assert not set(OPT_IN) & set(compute_weight_metrics(w))
    got = compute_weight_metrics(w, OPT_IN)
    assert all(not math.isnan(v.value) for v in got.values())
    assert compute_weight_metrics(w, ["rand_distance"])["rand_distance"] == got["rand_distance"]  # seeded
    assert dict(get_metric("rand_distance").options) == {"seed": 0}
    assert get_metric("rand_distance").evaluate(w, seed=1).value != got["rand_distance"].value


def test_weight_stats_computes_opt_in_only_by_name(tiny_qwen2):
    import toolkit

    _, folders = tiny_qwen2
    ds = toolkit.weight_stats(folders["single"], progress=False, cache=False)
    assert not set(OPT_IN) & set(ds.data_vars) and "alpha_xmin" in ds.data_vars
    ds = toolkit.weight_stats(folders["single"], ["mp_softrank", "rand_num_spikes"], progress=False, cache=False)
    assert set(ds.data_vars) == {"mp_softrank", "rand_num_spikes"}
    assert ds.mp_softrank.attrs["units"] == "1" and "Marchenko" in ds.mp_softrank.attrs["reference"]
