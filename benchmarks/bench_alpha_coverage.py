"""Coverage and width of alpha's 95 % interval beside WeightWatcher's sigma, on power laws of known exponent.

For each tail size n (30, 100, 400, 1000) and ``--draws`` independent draws (seeded), two settings:

- fixed tail: n values of a power law of exponent 2.5 above 1, fitted by the MLE with xmin at the smallest
  value (the tail the fit would keep);
- fitted spectrum: the same tail above a uniform bulk of 3n values below 1, fitted by the toolkit's default
  fit (:func:`toolkit.metrics.powerlaw.fit_power_law`, xmin chosen by the KS rule).

Each draw gets the toolkit's interval (:func:`toolkit.metrics.alpha_interval.alpha_interval`, xmin held),
WeightWatcher's analytic one, alpha +- 1.96 sigma with sigma = (alpha - 1)/sqrt(n), and, on the fitted spectrum,
the semi-parametric bootstrap that chooses xmin again in every replicate
(:func:`toolkit.metrics.alpha_interval_xmin.alpha_interval_xmin`, its log-normal pivot; ``--xmin-replicates``)
and, from the same replicates, the percentile pivot (:func:`toolkit.metrics.alpha_interval.pivot_interval`: what
its few replicates would give without the normal approximation) and the log pivot with the normal quantile 1.96
(what its Student-t quantile, which allows for the replicates' mean and deviation being estimated, corrects).
Printed: the share of intervals that cover 2.5,
and the mean width over the mean width of the exact interval of the fixed tail ((alpha - 1) S ~ Gamma(n - 1),
scipy's quantiles): the ideal width; saved as well: the mean seconds per interval, the spread of the fitted alpha
over that of the fixed tail's MLE (the width a valid interval needs), and the mean width over the central 95 %
range of the fitted alphas themselves (``width_over_alpha_range``: the ideal width of an interval around an
estimate whose xmin is chosen).

    .venv/bin/python benchmarks/bench_alpha_coverage.py --draws 200

Writes ``benchmarks/results/alpha_coverage.json`` (``--no-save``: print only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Results, load, table  # noqa: E402

TRUE_ALPHA = 2.5
LEVEL = 0.95
METHODS = ("bootstrap", "ww_sigma", "xmin_bootstrap", "xmin_percentile", "xmin_normal")
#: The methods of each setting (choosing xmin again needs a spectrum with a bulk to choose it from).
SETTINGS = {"fixed_tail": METHODS[:2], "fitted_spectrum": METHODS}


def _draw(rng, n: int):
    import numpy as np

    tail = np.sort((1.0 - rng.random(n)) ** (-1.0 / (TRUE_ALPHA - 1.0)))
    return tail, np.concatenate([rng.uniform(0.0, 1.0, 3 * n), tail])


def _normal_pivot(alpha: float, stars) -> tuple[float, float]:
    """The log pivot's interval with the normal quantile 1.96 (no allowance for estimating the replicates' mean and
    deviation from a few of them: what ``lognormal_pivot_interval``'s Student-t quantile corrects)."""
    import math

    import numpy as np

    logs = np.log((np.asarray(stars) - 1.0) / (alpha - 1.0))
    b, sd = float(logs.mean()), float(logs.std(ddof=1))
    return 1.0 + (alpha - 1.0) * math.exp(-b - 1.96 * sd), 1.0 + (alpha - 1.0) * math.exp(-b + 1.96 * sd)


def _intervals(lam, fit, methods, xmin_replicates: int) -> dict:
    """Each method's interval and the seconds it took."""
    import math
    import time

    from toolkit.metrics.alpha_interval import alpha_interval, pivot_interval
    from toolkit.metrics.alpha_interval_xmin import alpha_interval_xmin, semiparametric_alphas

    half = 1.96 * (fit.alpha - 1.0) / math.sqrt(fit.num_tail)
    make = {"bootstrap": lambda: alpha_interval(lam, fit), "ww_sigma": lambda: (fit.alpha - half, fit.alpha + half),
            "xmin_bootstrap": lambda: alpha_interval_xmin(lam, fit, replicates=xmin_replicates),
            # the same replicates (the same seed), the percentile pivot and the plain normal quantile
            "xmin_percentile": lambda: pivot_interval(fit.alpha, semiparametric_alphas(lam, fit,
                                                                                        replicates=xmin_replicates)),
            "xmin_normal": lambda: _normal_pivot(fit.alpha, semiparametric_alphas(lam, fit,
                                                                                  replicates=xmin_replicates))}
    out = {}
    for m in methods:
        t = time.perf_counter()
        out[m] = (*make[m](), time.perf_counter() - t)
    return out


def measure(n: int, draws: int, xmin_replicates: int) -> dict:
    import numpy as np
    from scipy import stats

    from toolkit.metrics.power_law_tail import PowerLawFit
    from toolkit.metrics.powerlaw import fit_power_law

    rng = np.random.default_rng([44, n])
    g = stats.gamma.ppf([(1 - LEVEL) / 2, (1 + LEVEL) / 2], n - 1)
    out = {s: {m: {"covered": 0, "widths": [], "seconds": []} for m in ms} for s, ms in SETTINGS.items()}
    ideal, alphas = [], {s: [] for s in SETTINGS}
    for _ in range(draws):
        tail, spectrum = _draw(rng, n)
        s = float(np.log(tail / tail[0]).sum())
        a = 1.0 + n / s
        ideal.append((g[1] - g[0]) / s)
        fits = {"fixed_tail": (tail, PowerLawFit(a, float(tail[0]), 0.0, n, xmax=float(tail[-1]))),
                "fitted_spectrum": (spectrum, fit_power_law(spectrum))}
        for setting, (lam, fit) in fits.items():
            alphas[setting].append(fit.alpha)
            for m, (lo, hi, sec) in _intervals(lam, fit, SETTINGS[setting], xmin_replicates).items():
                out[setting][m]["covered"] += int(lo <= TRUE_ALPHA <= hi)
                out[setting][m]["widths"].append(hi - lo)
                out[setting][m]["seconds"].append(sec)
    ideal_width = float(np.mean(ideal))
    spread = {k: float(np.subtract(*np.quantile(v, [(1 + LEVEL) / 2, (1 - LEVEL) / 2]))) for k, v in alphas.items()}
    return {setting: {m: {"coverage": v["covered"] / draws, "mean_width": float(np.mean(v["widths"])),
                          "width_over_ideal": float(np.mean(v["widths"])) / ideal_width,
                          "width_over_alpha_range": float(np.mean(v["widths"])) / spread[setting],
                          "mean_seconds": float(np.mean(v["seconds"]))} for m, v in per.items()}
            | {"alpha_sd_over_fixed": float(np.std(alphas[setting]) / np.std(alphas["fixed_tail"]))}
            for setting, per in out.items()} | {"ideal_width": ideal_width}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tails", type=int, nargs="+", default=[30, 100, 400, 1000])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--xmin-replicates", type=int, default=None, help="replicates of the xmin bootstrap "
                    "(default: its XMIN_REPLICATES)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    results = Results("alpha_coverage")
    from toolkit.metrics.alpha_interval import REPLICATES
    from toolkit.metrics.alpha_interval_xmin import XMIN_REPLICATES

    xmin_replicates = args.xmin_replicates or XMIN_REPLICATES
    per_tail, rows = {}, []
    for n in args.tails:
        m = per_tail[str(n)] = measure(n, args.draws, xmin_replicates)
        for setting in SETTINGS:
            rows.append([str(n), setting, *(f"{m[setting][k]['coverage']:.3f} ({m[setting][k]['width_over_ideal']:.2f})"
                                              if k in m[setting] else "-" for k in METHODS)])
        print(f"{load()}; tail {n} done", flush=True)
    print(f"{load()}; {args.draws} draws per tail size; coverage (mean width / ideal width)")
    print(table(rows, ["tail n", "setting", f"bootstrap interval ({REPLICATES} replicates)", "alpha +- 1.96 sigma",
                       f"xmin bootstrap ({xmin_replicates} replicates)", "the same, percentile pivot",
                       "the same, normal quantile"]))
    if not args.no_save:
        results.save({"tails": per_tail, "draws": args.draws, "true_alpha": TRUE_ALPHA, "level": LEVEL,
                      "replicates": REPLICATES, "xmin_replicates": xmin_replicates,
                      "goal": {"coverage": [0.92, 0.98], "width_over_ideal": 1.2}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
