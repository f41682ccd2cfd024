"""float32 against float64 spectra on a real checkpoint: agreement of every metric, and the time of each.

Runs ``weight_stats(source, precision=p)`` with every default metric for
p = float64 and float32, each in a fresh process with the cache off, and
prints per metric the largest deviation over the matrices both computed
(absolute for alpha, relative for the others), how many cells float32
flagged (NaN with the reason) where float64 has a number, and PASS/MISS
against issue 19's targets: alpha within 0.01 absolute, stable rank and
effective rank within 1e-4 relative, and no metric silently different (a
metric that is neither within 1e-3 relative nor flagged is a MISS).

Usage::

    .venv/bin/python benchmarks/bench_precision.py [--source PATH] [--threads N]

(default source: the embedded SmolLM2-135M GGUF). The 7B-shapes agreement is
printed by ``bench_scale.py --shapes 7b``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

TARGETS = {"alpha": ("abs", 0.01), "stable_rank": ("rel", 1e-4), "effective_rank": ("rel", 1e-4)}
OTHERS_RTOL = 1e-3


def child(source: str | None, precision: str, out: str, threads: int | None) -> None:
    import xarray as xr

    import toolkit

    xr.Dataset({"x": ("a", [1.0])})  # one-time import of dask.array by xarray, untimed
    H.set_threads(threads)
    t0 = time.perf_counter()
    ds = toolkit.weight_stats(source, progress=False, cache=False, precision=precision)
    seconds = time.perf_counter() - t0
    values = {v: ds[v].values.ravel().tolist() for v in ds.data_vars}
    Path(out).write_text(json.dumps({"values": values, "reasons": ds.nan_reason.values.ravel().tolist()}))
    H.emit(seconds=seconds)


def compare(a: dict, b: dict) -> list[list[str]]:
    rows = []
    for name in sorted(a["values"]):
        x64, x32 = a["values"][name], b["values"][name]
        kind, target = TARGETS.get(name, ("rel", OTHERS_RTOL))
        devs, flagged = [], 0
        for u, v in zip(x64, x32, strict=True):
            if math.isfinite(u) and not math.isfinite(v):
                flagged += 1
            elif math.isfinite(u) and math.isfinite(v):
                devs.append(abs(v - u) if kind == "abs" else abs(v - u) / max(abs(u), 1e-300))
        worst = max(devs, default=0.0)
        rows.append([name, str(len(devs)), str(flagged), f"{worst:.2g} {kind}", f"<= {target:g}",
                     H.verdict(worst <= target)])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=None, help="checkpoint (default: the embedded SmolLM2-135M)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.source, args.child, args.out, args.threads)
        return 0
    rec = H.Results("precision" if args.source is None else f"precision_{Path(args.source).stem}")
    print(f"machine: {H.machine()}\n{H.load()} at start")
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", **H.thread_env(args.threads)}
    results, times = {}, {}
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
        for p in ("float64", "float32"):
            cmd = me + ["--child", p, "--out", f"{tmp}/{p}.json"] + (["--source", args.source] if args.source else [])
            r = H.run_child(cmd + (["--threads", str(args.threads)] if args.threads else []), env=env)
            times[p] = r["seconds"]
            results[p] = json.loads(Path(f"{tmp}/{p}.json").read_text())
            print(f"  {p}: {r['seconds']:.1f} s, peak RSS {H.fmt_bytes(r['peak_rss'])}", flush=True)
    rows = compare(results["float64"], results["float32"])
    print()
    print(H.table(rows, ["metric", "cells compared", "flagged by float32", "max deviation", "target", ""]))
    print(f"float64 {times['float64']:.1f} s, float32 {times['float32']:.1f} s "
          f"({times['float64'] / times['float32']:.2f}x); {H.load()} at end")
    ok = all(r[-1] == "PASS" for r in rows)
    print("all targets met: PASS" if ok else "MISSED: " + ", ".join(r[0] for r in rows if r[-1] != "PASS"))
    rec.save({"source": args.source or "SmolLM2-135M-Instruct Q4_1 (embedded)", "seconds": times,
              "speedup": times["float64"] / times["float32"],
              "metrics": {r[0]: {"compared": int(r[1]), "flagged": int(r[2]), "max_dev": float(r[3].split()[0]),
                                 "kind": r[3].split()[1], "target": float(r[4].removeprefix("<= ")),
                                 "ok": r[5] == "PASS"} for r in rows}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
