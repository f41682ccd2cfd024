"""The aspect-ratio bias of alpha, and what FARMS does to it: Gaussian matrices of q = rows/cols = 1, 2, 4, 8.

For each size n (columns) and aspect ratio q, ``--seeds`` Gaussian matrices (q n x n, i.i.d. N(0, 1), float64)
are measured with the toolkit's ``alpha`` (WeightWatcher's default fit of the ESD of W^T W) and ``alpha_farms``
(the same fit of the average ESD of its square n x n blocks, :mod:`toolkit.metrics.farms`). A random matrix has
no heavy tail, so an unbiased statistic reads the same at every q: the table gives the mean and the standard
deviation over the seeds, and the spread of the means over q (max - min) for each statistic.

    .venv/bin/python benchmarks/bench_farms.py --sizes 128 256 --seeds 5

Writes ``benchmarks/results/farms.json`` (``--no-save``: print only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Results, load, table  # noqa: E402


def measure(n: int, q: int, seed: int) -> dict:
    import torch

    from toolkit.metrics.farms import alpha_farms
    from toolkit.metrics.powerlaw import alpha
    from toolkit.metrics.spectral import singular_values

    w = torch.randn(q * n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    t = time.perf_counter()
    a = alpha(w, singular_values(w))
    t_alpha = time.perf_counter() - t
    t = time.perf_counter()
    f = alpha_farms(w)
    return {"alpha": a, "alpha_farms": f, "alpha_s": t_alpha, "farms_s": time.perf_counter() - t}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256], help="columns n of the matrices")
    ap.add_argument("--ratios", type=int, nargs="+", default=[1, 2, 4, 8], help="aspect ratios q = rows / n")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    results = Results("farms")
    rows, figures = [], {"sizes": {}}
    for n in args.sizes:
        per_q = {}
        for q in args.ratios:
            runs = [measure(n, q, seed) for seed in range(args.seeds)]
            per_q[q] = {k: [r[k] for r in runs] for k in runs[0]}
            a, f = per_q[q]["alpha"], per_q[q]["alpha_farms"]
            rows.append([str(n), str(q), f"{statistics.mean(a):.2f} ± {statistics.stdev(a):.2f}",
                         f"{statistics.mean(f):.2f} ± {statistics.stdev(f):.2f}",
                         f"{statistics.mean(per_q[q]['farms_s']) / statistics.mean(per_q[q]['alpha_s']):.1f}x"])
        spread = {k: max(statistics.mean(v[k]) for v in per_q.values()) - min(statistics.mean(v[k])
                                                                               for v in per_q.values())
                  for k in ("alpha", "alpha_farms")}
        figures["sizes"][str(n)] = {"per_ratio": {str(q): v for q, v in per_q.items()}, "spread_of_means": spread}
        rows.append([str(n), "spread", f"{spread['alpha']:.2f}", f"{spread['alpha_farms']:.2f}", ""])
    print(f"load {load()}; {args.seeds} seeds per cell")
    print(table(rows, ["n", "q", "alpha (mean ± sd)", "alpha_farms (mean ± sd)", "farms time / alpha time"]))
    if not args.no_save:
        figures.update(seeds=args.seeds, ratios=args.ratios)
        results.save(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
