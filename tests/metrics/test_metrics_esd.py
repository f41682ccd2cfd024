"""WeightWatcher's analyze() columns (fit, norms, rank, entropy) and the quality label:
hand-computed spectra, independent NumPy/SciPy references, one fit per matrix, threads."""

import math
import threading

import numpy as np
import pytest
import scipy.stats
import torch
from test_metrics_powerlaw import brute_force, pareto

import toolkit.metrics.powerlaw as powerlaw
from toolkit.metrics import compute_weight_metrics, get_metric, list_metrics, singular_values
from toolkit.metrics.esd_fit import esd_quality

FIT_COLUMNS = ["alpha", "alpha_xmin", "alpha_xmax", "alpha_ks_distance", "alpha_sigma", "num_pl_spikes",
               "alpha_weighted", "log_alpha_norm"]
OTHER_COLUMNS = ["log_norm", "log_spectral_norm", "matrix_rank", "rank_loss", "spectral_entropy"]
COLUMNS = FIT_COLUMNS + OTHER_COLUMNS


def values(s, w=None, names=COLUMNS):
    """Every column from given singular values (float64 tensor), through the registered records."""
    w = torch.zeros(len(s), len(s)) if w is None else w
    return {n: get_metric(n).evaluate(w, s) for n in names}


def test_registered_with_metadata_after_alpha():
    names = list_metrics()
    assert names[names.index("alpha"):names.index("alpha") + len(COLUMNS)] == COLUMNS
    for n in COLUMNS[1:]:
        m = get_metric(n)
        assert m.kind == "weight" and m.needs_singular_values and m.units == "1"
        attrs = m.attrs()
        texts = {k: v for k, v in attrs.items() if k not in ("valid_min", "valid_max")}  # the domain: numbers
        assert all(isinstance(v, str) and v for v in texts.values()), n
        assert "WeightWatcher 0.7.7" in attrs["reference"] or "WeightWatcher 0.7.7" in attrs["description"]
    assert "log10(sum_i lambda_i^alpha)" in get_metric("log_alpha_norm").description
    assert "(alpha - 1) / sqrt(n)" in get_metric("alpha_sigma").description


def test_hand_computed_small_n_fit():
    # lambda = 2^k, k = 0..7: 8 eigenvalues, WeightWatcher's small-N fit (N < 20), whose only tail of
    # at least 8 starts at lambda = 1: alpha = 1 + (n-1)/sum ln(lambda/1) = 1 + 7/(28 ln 2),
    # so (lambda_t / xmin)^(1 - alpha) = exp(-t/4) and D = max_t |1 - exp(-t/4) - t/8| (t = 3).
    lam = 2.0 ** np.arange(8)
    s = torch.tensor(np.sqrt(lam)[::-1].copy())
    v = {k: x.value for k, x in values(s).items()}
    a = 1 + 1 / (4 * math.log(2))
    assert v["alpha"] == pytest.approx(a, rel=1e-13)
    assert v["alpha_xmin"] == pytest.approx(1.0, rel=1e-13)
    assert v["alpha_xmax"] == pytest.approx(128.0, rel=1e-13)
    assert v["alpha_ks_distance"] == pytest.approx(1 - math.exp(-0.75) - 3 / 8, rel=1e-12)
    assert v["alpha_sigma"] == pytest.approx((a - 1) / math.sqrt(8), rel=1e-13)
    assert v["num_pl_spikes"] == 8
    assert v["alpha_weighted"] == pytest.approx(a * 7 * math.log10(2), rel=1e-13)
    assert v["log_alpha_norm"] == pytest.approx(math.log10((2 ** (8 * a) - 1) / (2 ** a - 1)), rel=1e-13)
    assert v["log_norm"] == pytest.approx(math.log10(255.0), rel=1e-14)
    assert v["log_spectral_norm"] == pytest.approx(math.log10(128.0), rel=1e-14)
    assert v["matrix_rank"] == 8 and v["rank_loss"] == 0
    p = lam / 255.0
    assert v["spectral_entropy"] == pytest.approx(-np.sum(p * np.log(p)) / math.log(8), rel=1e-13)


def test_hand_computed_rank_deficient():
    # W = diag(2, 1, 0, 0) padded to 4 x 6: rank 2, lambda = (4, 1), p = (0.8, 0.2).
    w = torch.zeros(4, 6, dtype=torch.float64)
    w[0, 0], w[1, 1] = 2.0, 1.0
    got = compute_weight_metrics(w, OTHER_COLUMNS)
    assert got["matrix_rank"].value == 2 and got["rank_loss"].value == 2
    assert got["log_norm"].value == pytest.approx(math.log10(5.0), rel=1e-14)
    assert got["log_spectral_norm"].value == pytest.approx(math.log10(4.0), rel=1e-14)
    h = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2)) / math.log(2)
    assert got["spectral_entropy"].value == pytest.approx(h, rel=1e-13)
    flat = compute_weight_metrics(torch.eye(5), ["spectral_entropy"])["spectral_entropy"]
    assert flat.value == pytest.approx(1.0, rel=1e-14)  # equal eigenvalues: maximal entropy


def _matrices():
    rng = np.random.default_rng(3)
    out = []
    for k, (m, n) in enumerate([(40, 100), (120, 60), (90, 90), (30, 300), (200, 150)]):
        w = rng.standard_t(3, size=(m, n)) if k % 2 else rng.standard_normal((m, n)) @ np.diag(rng.pareto(2.0, n) + 1)
        out.append(torch.tensor(w, dtype=torch.float32))
    return out


@pytest.mark.parametrize("w", _matrices(), ids=lambda w: "x".join(map(str, w.shape)))
def test_against_independent_numpy_scipy(w):
    got = {k: v.value for k, v in compute_weight_metrics(w, COLUMNS).items()}
    w64 = w.double().numpy()
    sv = np.linalg.svd(w64, compute_uv=False)  # float64 LAPACK SVD, as WeightWatcher on the CPU
    lam = sv ** 2
    d, a, xmin, n_tail = brute_force(lam)  # WWFit written as plain loops
    assert got["alpha"] == pytest.approx(a, rel=1e-9)
    assert got["alpha_xmin"] == pytest.approx(xmin, rel=1e-9)
    assert got["alpha_xmax"] == pytest.approx(lam.max(), rel=1e-12)
    assert got["alpha_ks_distance"] == pytest.approx(d, rel=1e-8)
    assert got["alpha_sigma"] == pytest.approx((a - 1) / math.sqrt(n_tail), rel=1e-9)
    assert got["num_pl_spikes"] == np.count_nonzero(lam >= xmin * (1 - 1e-12))
    assert got["alpha_weighted"] == pytest.approx(a * np.log10(lam.max()), rel=1e-9)
    assert got["log_alpha_norm"] == pytest.approx(np.log10(np.sum(lam ** a)), rel=1e-9)
    assert got["log_norm"] == pytest.approx(np.log10(np.linalg.norm(w64, "fro") ** 2), rel=1e-12)
    assert got["log_spectral_norm"] == pytest.approx(2 * np.log10(np.linalg.norm(w64, 2)), rel=1e-12)
    rank = np.linalg.matrix_rank(w64)
    assert got["matrix_rank"] == rank and got["rank_loss"] == min(w.shape) - rank
    assert got["spectral_entropy"] == pytest.approx(scipy.stats.entropy(lam) / np.log(rank), rel=1e-10)


def test_low_rank_product_rank_and_entropy():
    g = torch.Generator().manual_seed(5)
    w = (torch.randn(70, 9, generator=g, dtype=torch.float64) @ torch.randn(9, 110, generator=g, dtype=torch.float64))
    got = compute_weight_metrics(w.float(), ["matrix_rank", "rank_loss", "spectral_entropy"])
    assert got["matrix_rank"].value == np.linalg.matrix_rank(w.numpy()) == 9
    assert got["rank_loss"].value == 61
    lam = np.linalg.svd(w.float().double().numpy(), compute_uv=False)[:9] ** 2
    assert got["spectral_entropy"].value == pytest.approx(scipy.stats.entropy(lam) / np.log(9), rel=1e-6)


def test_num_pl_spikes_counts_ties_below_the_tail_start():
    # Many tied eigenvalues: num_pl_spikes counts every lambda >= xmin, the tail size only from xmin's index.
    ev = np.round(pareto(3.0, 300, seed=4), 1)
    fit = powerlaw.fit_power_law(ev)
    assert fit.num_pl_spikes == np.count_nonzero(ev >= fit.xmin) >= fit.num_tail
    assert fit.sigma == pytest.approx((fit.alpha - 1) / math.sqrt(fit.num_tail))
    assert fit.xmax == ev.max()


def test_one_fit_per_matrix_shared_by_every_fit_column(monkeypatch):
    calls = []
    real = powerlaw.fit_power_law
    monkeypatch.setattr(powerlaw, "fit_power_law", lambda *a, **k: calls.append(1) or real(*a, **k))
    w = _matrices()[0]
    compute_weight_metrics(w, FIT_COLUMNS)
    assert len(calls) == 1
    s = singular_values(w)
    for n in FIT_COLUMNS:
        get_metric(n).evaluate(w, s)
    assert len(calls) == 2  # a new singular-value tensor: one more fit, then shared
    s.mul_(2.0)  # in place: the memo sees the new version and refits
    assert get_metric("alpha_xmin").evaluate(w, s).value == pytest.approx(4 * get_metric("alpha_xmin").evaluate(
        w, singular_values(w)).value)
    assert len(calls) == 4
    get_metric("alpha").evaluate(w, s, threshold=1e-3)  # other options: another fit
    assert len(calls) == 5


def test_degenerate_fit_reason_shared_and_not_refitted(monkeypatch):
    calls = []
    real = powerlaw.fit_power_law
    monkeypatch.setattr(powerlaw, "fit_power_law", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = compute_weight_metrics(torch.eye(40), COLUMNS)
    assert len(calls) == 1
    for n in FIT_COLUMNS:
        assert math.isnan(got[n].value) and got[n].reason == got["alpha"].reason and "equal" in got[n].reason
    assert got["matrix_rank"].value == 40 and got["log_norm"].value == pytest.approx(math.log10(40))
    zero = compute_weight_metrics(torch.zeros(12, 20), COLUMNS)
    assert zero["matrix_rank"].value == 0 and zero["rank_loss"].value == 12
    for n in FIT_COLUMNS + ["log_norm", "log_spectral_norm"]:
        assert math.isnan(zero[n].value) and zero[n].reason == "all-zero matrix", n
    assert "rank 0" in zero["spectral_entropy"].reason
    short = compute_weight_metrics(torch.randn(5, 50), COLUMNS)
    assert all("too short a spectrum" in short[n].reason for n in FIT_COLUMNS)
    assert not math.isnan(short["spectral_entropy"].value)
    one = compute_weight_metrics(torch.ones(10, 20), ["spectral_entropy", "matrix_rank"])
    assert one["matrix_rank"].value == 1 and "rank 1" in one["spectral_entropy"].reason


def test_two_threads_measure_at_once():
    mats = _matrices()
    serial = [compute_weight_metrics(w, COLUMNS) for w in mats]
    out: dict = {}
    barrier = threading.Barrier(2)

    def work(k):
        barrier.wait()
        for rep in range(3):
            for i in range(k, len(mats), 2):
                out[(rep, i)] = compute_weight_metrics(mats[i], COLUMNS)

    threads = [threading.Thread(target=work, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(out[(rep, i)] == serial[i] for rep in range(3) for i in range(len(mats)))


def test_esd_quality_labels_and_thresholds():
    assert esd_quality(1.99) == "over-trained"
    assert esd_quality(2.0) == "ok" and esd_quality(6.0) == "ok" and esd_quality(4.1) == "ok"
    assert esd_quality(6.01) == "under-trained"
    assert esd_quality(2.5, over=3.0) == "over-trained" and esd_quality(5.0, under=4.5) == "under-trained"
    assert esd_quality(math.nan) == "not fitted"
    assert esd_quality(math.nan, reason="too short a spectrum") == "not fitted: too short a spectrum"
    grid = esd_quality(np.array([[1.5, 3.0], [np.nan, 9.0]]), reason=np.array([["", ""], ["all-zero matrix", ""]]))
    assert grid.shape == (2, 2) and grid.tolist() == [["over-trained", "ok"],
                                                      ["not fitted: all-zero matrix", "under-trained"]]
    with pytest.raises(ValueError, match="over"):
        esd_quality(3.0, over=7.0, under=6.0)


def test_quality_of_real_alphas_matches_weightwatcher_warning_rule():
    # WeightWatcher: warning = over-trained if alpha < 2, under-trained if alpha > 6, else "".
    mats = _matrices()
    for w in mats:
        a = compute_weight_metrics(w, ["alpha"])["alpha"].value
        expected = "over-trained" if a < 2 else "under-trained" if a > 6 else "ok"
        assert esd_quality(a) == expected


def ww_clip_xmax_reference(ev, max_fingers=10, finger_thresh=1.0):
    """WeightWatcher's fit_clipped_powerlaw with its default pl_package, from the brute-force WWFit."""
    x = np.sort(ev)
    x = x[x > 1e-5]
    first = brute_force(x)
    best, fingers = first, 0
    for idx in range(2, max_fingers):
        fit = brute_force(x[:-idx])
        if fit[1] + finger_thresh < first[1]:
            best, fingers = fit, idx - 1
            break
        if fit[1] <= 2.0:
            break
    return best, fingers, first[1]


def test_fix_fingers_clip_xmax_and_xmax_clipping():
    # 30 bulk values and a "finger" of 16 nearly equal top eigenvalues: the tail fit lands on the finger
    # (alpha 15); clipping the two largest gives the fit of the whole tail back.
    ev = np.concatenate([np.linspace(0.1, 1, 30) ** 3 * 10, 50 * (1 + 0.01 * np.arange(16))])
    plain = powerlaw.fit_power_law(ev)
    fixed = powerlaw.fit_power_law(ev, fix_fingers="clip_xmax")
    (d, a, xmin, n), fingers, raw = ww_clip_xmax_reference(ev)
    assert plain.alpha > 10 and fixed.alpha < 2 and fixed.num_fingers == fingers == 2
    assert fixed.alpha == pytest.approx(a, rel=1e-9) and fixed.xmin == xmin and fixed.num_tail == n
    assert fixed.ks_distance == pytest.approx(d, rel=1e-9) and fixed.raw_alpha == pytest.approx(raw, rel=1e-9)
    assert fixed.xmax == np.sort(ev)[-4]  # the largest eigenvalue of the kept fit (3 clipped)
    assert fixed.num_pl_spikes == np.count_nonzero(ev >= xmin)  # counted on the whole spectrum
    assert plain.num_fingers == 0 and plain.raw_alpha == plain.alpha
    for w_ev in (pareto(2.5, 300, seed=1), np.concatenate([np.full(3, 1e-7), pareto(3.0, 80, seed=2)])):
        (_, a, _, _), fingers, _ = ww_clip_xmax_reference(w_ev)
        got = powerlaw.fit_power_law(w_ev, fix_fingers="clip_xmax")
        assert got.alpha == pytest.approx(a, rel=1e-9) and got.num_fingers == fingers
    # xmax=-k: the k largest eigenvalues are left out of everything, num_pl_spikes included.
    clipped = powerlaw.fit_power_law(ev, xmax=-3)
    assert clipped == powerlaw.fit_power_law(np.sort(ev)[:-3])
    with pytest.raises(powerlaw.DegenerateMatrix, match="more than half"):
        powerlaw.fit_power_law(ev, xmax=-30)
    with pytest.raises(ValueError, match="clip_xmax"):
        powerlaw.fit_power_law(ev, fix_fingers="peak")  # xmin_peak: tests/metrics/test_fit_options.py


def test_fit_options_reach_every_column_through_one_fit(monkeypatch):
    calls = []
    real = powerlaw.fit_power_law
    monkeypatch.setattr(powerlaw, "fit_power_law", lambda *a, **k: calls.append(k) or real(*a, **k))
    ev = np.concatenate([np.linspace(0.1, 1, 30) ** 3 * 10, 50 * (1 + 0.01 * np.arange(16))])
    s = torch.tensor(np.sqrt(np.sort(ev)[::-1]).copy())
    w = torch.zeros(46, 60)
    got = {n: get_metric(n).evaluate(w, s, fix_fingers="clip_xmax").value for n in FIT_COLUMNS}
    assert len(calls) == 1 and calls[0]["fix_fingers"] == "clip_xmax"
    assert got["alpha"] == pytest.approx(real(ev, fix_fingers="clip_xmax").alpha)
    assert got["alpha_weighted"] == pytest.approx(got["alpha"] * math.log10(ev.max()))  # all eigenvalues
    get_metric("alpha").evaluate(w, s, fix_fingers=None, xmax=None)  # the defaults spelled out: the default fit
    get_metric("alpha_xmin").evaluate(w, s)
    assert len(calls) == 2
    with pytest.raises(TypeError, match="unknown power-law fit option"):
        get_metric("alpha").evaluate(w, s, xmin_min=3.0)


def test_ww_skip_reason_follows_its_size_rules():
    from toolkit.metrics.esd_fit import ww_skip_reason

    assert ww_skip_reason(576, 1536) == "" and ww_skip_reason(8, 100) == ""
    assert "min_evals" in ww_skip_reason(7, 100) and "max_evals" in ww_skip_reason(20000, 16000)
    assert "max_N" in ww_skip_reason(49152 * 2, 576) and ww_skip_reason(49152, 576) == ""
    assert ww_skip_reason(7, 100, min_evals=0) == "" and "max_N" in ww_skip_reason(100, 600, max_n=500)
