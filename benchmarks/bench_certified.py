"""precision="float32-certified" against float64 on one layer of Qwen2.5-7B shapes, cell by cell, side by side.

The seven matrices of one layer (q, o 3584 x 3584; k, v 512 x 3584; gate, up
18944 x 3584; down 3584 x 18944), bf16, in two families:

  random    i.i.d. N(0, 0.02^2) entries (a Marchenko-Pastur bulk, alpha ~ 6-25:
            the case where the KS choice of xmin is most fragile)
  spiked    the same bulk plus 48 rank-one spikes of power-law strengths (a
            bulk under a heavy tail, as trained layers have)

For each matrix, in one process and alternating (so load hits both alike),
``evaluate_matrix`` (what ``weight_stats`` runs per cell) in float64 and in
``"float32-certified"`` with the metrics a float32 Gram can serve to 1e-5
(every default spectral metric but condition number, matrix rank, rank loss,
spectral entropy and effective rank, which read the smallest singular
values), and prints side by side: seconds, the precision served, why not
float32, the bound delta / lambda_max against the measured
max |lambda32 - lambda64| / lambda_max, and each metric's deviation from
float64 against its tolerance. It also says which cells the certificate
would serve with *every* default metric (certify() on the same spectrum),
and measures what a float32 eigensolve (``ssyevd``) would do to the
eigenvalues (the measured error against the tolerance it would need).

Usage::

    .venv/bin/python benchmarks/bench_certified.py [--threads N] [--families random,spiked]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

SHAPES = [("attn.q", (3584, 3584)), ("attn.k", (512, 3584)), ("attn.v", (512, 3584)), ("attn.o", (3584, 3584)),
          ("mlp.gate", (18944, 3584)), ("mlp.up", (18944, 3584)), ("mlp.down", (3584, 18944))]
SPIKES = 48


def matrix(family: str, shape, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    w = torch.randn(shape, generator=g) * 0.02
    if family == "spiked":
        m, n = shape
        strength = 0.02 * math.sqrt(max(m, n)) * 3.0 * (1 - torch.rand(SPIKES, generator=g)) ** -0.6
        u = torch.randn(m, SPIKES, generator=g) / math.sqrt(m)
        v = torch.randn(n, SPIKES, generator=g) / math.sqrt(n)
        w += (u * strength) @ v.T
    return w.to(torch.bfloat16).float()


def deviations(r32, r64, lam_top: float) -> dict:
    from toolkit.metrics.certificate import TOLERANCES

    out = {}
    for name, ref in r64.values.items():
        got = r32.values[name]
        if not (math.isfinite(ref) and math.isfinite(got)):
            continue
        kind, tol = TOLERANCES.get(name, ("rel", 1e-12))
        if kind == "abs_alpha":
            tol *= max(1.0, abs(math.log10(lam_top)))
        dev = abs(got - ref) / abs(ref) if kind == "rel" and ref else abs(got - ref)
        out[name] = {"dev": dev, "tol": tol, "ok": dev <= tol}
    return out


def run_family(family: str, metrics, everything, seed0: int) -> list[dict]:
    import numpy as np

    from toolkit.metrics.certificate import certify
    from toolkit.metrics.eigen_bound import certified_spectrum
    from toolkit.metrics.evaluate import evaluate_matrix

    rows = []
    for i, (comp, shape) in enumerate(SHAPES):
        w = matrix(family, shape, seed0 + i)
        t0 = time.perf_counter()
        r64 = evaluate_matrix(w, metrics, keep_spectrum=True)
        t1 = time.perf_counter()
        r32 = evaluate_matrix(w, metrics, precision="float32-certified")
        t2 = time.perf_counter()
        lam64 = r64.eigenvalues
        lam32, bound = certified_spectrum(w)  # untimed: the same spectrum the certified call served from
        err = float(np.abs(lam32 - lam64).max())
        every = certify(everything, lam32, bound, tuple(shape))
        row = {"family": family, "component": comp, "shape": list(shape), "float64_s": t1 - t0,
               "certified_s": t2 - t1, "served": r32.precision_served, "why": r32.certificate,
               "delta_rel": bound.delta / lam64[0], "gram_rel": bound.gram / lam64[0], "actual_rel": err / lam64[0],
               "all_metrics_served": "float64" if every else "float32", "all_metrics_why": every,
               "deviations": deviations(r32, r64, float(lam64[0])) if r32.precision_served == "float32" else {}}
        rows.append(row)
        print(f"  {family:6s} {comp:8s} {str(tuple(shape)):14s} f64 {row['float64_s']:6.2f} s  cert "
              f"{row['certified_s']:6.2f} s  served {row['served']}  delta/lmax {row['delta_rel']:.1e} "
              f"(actual {row['actual_rel']:.1e})  {row['why'][:70]}", flush=True)
        del w
    return rows


def eig32_error() -> dict:
    """What a float32 eigensolve (ssyevd) does to the eigenvalues of a 3584 x 3584 Gram (q of the random family)."""
    import numpy as np
    import torch

    x = matrix("random", (3584, 3584), 0).numpy()
    g = x @ x.T
    lam64 = np.linalg.eigvalsh(x.astype(np.float64) @ x.astype(np.float64).T)
    t0 = time.perf_counter()
    lam_s = torch.linalg.eigvalsh(torch.from_numpy(g)).double().numpy()
    t1 = time.perf_counter()
    lam_d = torch.linalg.eigvalsh(torch.from_numpy(g.astype(np.float64))).numpy()
    t2 = time.perf_counter()
    top = lam64[-1]
    return {"ssyevd_max_err_rel": float(np.abs(lam_s - lam64).max() / top),
            "dsyevd_of_float32_gram_max_err_rel": float(np.abs(lam_d - lam64).max() / top),
            "ssyevd_s": t1 - t0, "dsyevd_s": t2 - t1}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--families", default="random,spiked")
    ap.add_argument("--no-eig32", action="store_true", help="skip the float32-eigensolve measurement")
    args = ap.parse_args(argv)
    H.set_threads(args.threads)
    import toolkit  # noqa: F401 - registers the metrics
    from toolkit.metrics.certificate import TOLERANCES
    from toolkit.metrics.registry import resolve_metrics
    from toolkit.metrics.spectral import SMALL_VALUE_METRICS

    rec = H.Results("certified_7b")
    print(f"machine: {H.machine()}\n{H.load()} at start")
    names = [n for n in TOLERANCES if n not in SMALL_VALUE_METRICS | {"effective_rank"}] + ["frobenius_norm"]
    metrics = resolve_metrics(names, kind="weight")
    everything = resolve_metrics(None, kind="weight")
    rows = []
    for k, family in enumerate(args.families.split(",")):
        rows += run_family(family, metrics, everything, 100 * k)
    figures = {"metrics": names, "cells": rows}
    for family in {r["family"] for r in rows}:
        mine = [r for r in rows if r["family"] == family]
        t64 = sum(r["float64_s"] for r in mine)
        t32 = sum(r["certified_s"] for r in mine)
        devs = [d for r in mine for d in r["deviations"].values()]
        figures[family] = {"float64_s": t64, "certified_s": t32, "speedup": t64 / t32,
                           "served_float32": sum(r["served"] == "float32" for r in mine), "cells": len(mine),
                           "all_metrics_float32": sum(r["all_metrics_served"] == "float32" for r in mine),
                           "within_tolerance": all(d["ok"] for d in devs),
                           "delta_over_actual_max": max(r["delta_rel"] / max(r["actual_rel"], 1e-300) for r in mine),
                           "delta_bounds_actual": all(r["delta_rel"] >= r["actual_rel"] for r in mine)}
    if not args.no_eig32:
        figures["eig32"] = eig32_error()
    print()
    head = ["family", "float64 s", "certified s", "speedup", "float32 cells", "with all metrics", "tolerances",
            "delta >= actual"]
    table = [[f, f"{v['float64_s']:.1f}", f"{v['certified_s']:.1f}", f"{v['speedup']:.2f}x",
              f"{v['served_float32']}/{v['cells']}", f"{v['all_metrics_float32']}/{v['cells']}",
              H.verdict(v["within_tolerance"]), H.verdict(v["delta_bounds_actual"])]
             for f, v in figures.items() if isinstance(v, dict) and "speedup" in v]
    print(H.table(table, head))
    if "eig32" in figures:
        e = figures["eig32"]
        print(f"float32 eigensolve of a 3584^2 float32 Gram: max |dlambda| / lambda_max {e['ssyevd_max_err_rel']:.1e} "
              f"({e['ssyevd_s']:.1f} s) against {e['dsyevd_of_float32_gram_max_err_rel']:.1e} for the float64 "
              f"eigensolve of the same Gram ({e['dsyevd_s']:.1f} s)")
    print(f"{H.load()} at end")
    rec.save(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
