"""The aspect-ratio bias of alpha, with and without FARMS: i.i.d. matrices of q = rows/cols = 1, 2, 4, 8.

For each entry distribution (Gaussian, Student-t with 3 degrees of freedom), size n (columns) and aspect ratio
q, ``--seeds`` matrices of q n x n (float64) are measured with five statistics, side by side:

- ``alpha``: the toolkit's default (WeightWatcher's fit of the ESD of the whole matrix);
- ``alpha_peak``: the FARMS authors' ``xmin_peak`` fit of the whole ESD (their baseline without FARMS,
  :func:`toolkit.metrics.farms.fit_peak_authors`);
- ``alpha_farms``: FARMS as its authors run it (100 x 200 windows on 10 x 10 positions, their ``xmin_peak``
  fit; :mod:`toolkit.metrics.farms`);
- ``farms_ww_fit`` (variant): the same windows fitted with the default fit;
- ``square_blocks`` (variant, the toolkit's former ``alpha_farms``): the ceil(m/n) square n x n row blocks
  pooled and fitted with the default fit.

The entries are i.i.d., so a statistic free of aspect-ratio bias reads the same at every q: the table gives the
mean and standard deviation over the seeds, and the spread of the means over q (max - min) per statistic.

    .venv/bin/python benchmarks/bench_farms.py --sizes 256 512 --seeds 5

Writes ``benchmarks/results/farms.json`` (``--no-save``: print only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Results, load, table  # noqa: E402

STATS = ("alpha", "alpha_peak", "alpha_farms", "farms_ww_fit", "square_blocks")
DISTS = {"gaussian": "Gaussian", "student_t3": "Student-t(3)"}


def matrix(dist: str, n: int, q: int, seed: int):
    import numpy as np
    import torch

    rng = np.random.default_rng([seed, n, q])
    x = rng.standard_normal((q * n, n)) if dist == "gaussian" else rng.standard_t(3.0, size=(q * n, n))
    return torch.from_numpy(x)


def measure(w) -> dict:
    import numpy as np

    from toolkit.metrics.farms import farms_eigenvalues, fit_peak_authors
    from toolkit.metrics.powerlaw import fit_power_law
    from toolkit.metrics.spectral import singular_values

    lam = singular_values(w).numpy() ** 2
    pooled = farms_eigenvalues(w)
    n = w.shape[1]
    starts = list(range(0, w.shape[0] - n + 1, n)) + ([w.shape[0] - n] if w.shape[0] % n else [])
    blocks = np.concatenate([singular_values(w[s:s + n]).numpy() ** 2 for s in starts])
    return {"alpha": fit_power_law(lam).alpha, "alpha_peak": fit_peak_authors(lam).alpha,
            "alpha_farms": fit_peak_authors(pooled).alpha, "farms_ww_fit": fit_power_law(pooled).alpha,
            "square_blocks": fit_power_law(blocks).alpha}


def spreads(per_q: dict) -> dict:
    return {k: max(statistics.mean(v[k]) for v in per_q.values()) - min(statistics.mean(v[k])
                                                                         for v in per_q.values()) for k in STATS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512], help="columns n of the matrices")
    ap.add_argument("--ratios", type=int, nargs="+", default=[1, 2, 4, 8], help="aspect ratios q = rows / n")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    results = Results("farms")
    rows, figures = [], {"dists": {}}
    for dist in DISTS:
        figures["dists"][dist] = {}
        for n in args.sizes:
            per_q = {}
            for q in args.ratios:
                runs = [measure(matrix(dist, n, q, seed)) for seed in range(args.seeds)]
                per_q[q] = {k: [r[k] for r in runs] for k in STATS}
                rows.append([DISTS[dist], str(n), str(q), *(f"{statistics.mean(per_q[q][k]):.2f} ± "
                                                              f"{statistics.stdev(per_q[q][k]):.2f}" for k in STATS)])
            spread = spreads(per_q)
            figures["dists"][dist][str(n)] = {"per_ratio": {str(q): v for q, v in per_q.items()},
                                              "spread_of_means": spread}
            rows.append([DISTS[dist], str(n), "spread", *(f"{spread[k]:.2f}" for k in STATS)])
    print(f"load {load()}; {args.seeds} seeds per cell")
    print(table(rows, ["entries", "n", "q", *STATS]))
    if not args.no_save:
        figures.update(seeds=args.seeds, ratios=args.ratios, sizes=args.sizes, stats=list(STATS))
        results.save(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
