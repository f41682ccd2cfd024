"""The first call of a fresh process against a second call and against the float64 floor (issue 47).

What a user meets first is the first call, in a CLI run, a fresh kernel, a Voila page or a Dask worker: its
imports and one-time set-up (lazy modules, thread pools, the eigensolver routes' first calls) are paid there.
On one Qwen2.5-7B-shaped layer (``_scale_7b.py``: hidden 3584, intermediate 18944, bf16, random; generated
untimed), ``--reps`` times, each a fresh process:

  calls   ``import toolkit`` (timed apart), then ``weight_stats(folder, cache=False)`` twice in the same
          process: the first call and the second (the steady state)
  floor   the linear algebra alone (``_scale_7b.child_floor``): each component matrix's smaller Gram matrix
          and its ``eigvalsh`` in float64, reading and conversion untimed

The toolkit runs in ``benchmarks/.user-venv`` (``--toolkit-env user``, the default: this checkout with its
runtime dependencies only, as a user's ``pip install`` gives it; ``_harness.toolkit_python``), the floor in the
same interpreter. Targets (issue 47): first call <= 1.05x the second, and <= 1.05x the floor.

    .venv/bin/python benchmarks/bench_first_call.py [--reps 3] [--keep DIR] [--toolkit-env user|project]

Writes ``benchmarks/results/first_call.json`` (``--no-save``: print only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
import _scale_7b as S  # noqa: E402

#: Goal of issue 47: the first call within this factor of the second call and of the floor.
GOAL = 1.05


def child_calls(folder: Path) -> None:
    """``import toolkit``, then two ``weight_stats`` calls of the folder, each timed."""
    t0 = time.perf_counter()
    import toolkit

    t1 = time.perf_counter()
    times = []
    for _ in range(2):
        t = time.perf_counter()
        ds = toolkit.weight_stats(str(folder), progress=False, cache=False)
        times.append(time.perf_counter() - t)
    H.emit(import_s=t1 - t0, first_s=times[0], second_s=times[1], cells=int(ds.stable_rank.notnull().sum()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3, help="fresh processes of each kind (medians reported)")
    ap.add_argument("--keep", type=Path, default=None, help="generate the layer into / reuse this folder")
    ap.add_argument("--toolkit-env", default="user", choices=["user", "project"],
                    help="user (default): benchmarks/.user-venv; project: this .venv (test extras installed)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child == "calls":
        child_calls(args.dir)
        return 0
    if args.child == "floor":
        S.child_floor(args.dir, None, "float64")
        return 0
    if args.child == "generate":
        S.generate(args.dir, 1)
        return 0

    results = H.Results("first_call")
    python = H.toolkit_python(args.toolkit_env)
    me = str(Path(__file__).resolve())
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-first-call-") as tmp:
        folder = args.keep or Path(tmp) / "layer"
        if not (folder / "config.json").is_file():
            H.run_child([sys.executable, me, "--child", "generate", "--dir", str(folder)])
        print(f"{H.machine()}\n{H.load()} at start; one Qwen2.5-7B-shaped layer in {folder}; toolkit: "
              f"{args.toolkit_env} ({python})", flush=True)
        runs = {"calls": [], "floor": []}
        for rep in range(args.reps):
            for kind in ("calls", "floor") if rep % 2 == 0 else ("floor", "calls"):
                r = H.run_child([python, me, "--child", kind, "--dir", str(folder)], env=env)
                r["load"] = H.load()
                runs[kind].append(r)
                shown = (f"import {r['import_s']:.2f} s, first {r['first_s']:.1f} s, second {r['second_s']:.1f} s"
                         if kind == "calls" else f"floor {r['seconds']:.1f} s")
                print(f"  rep {rep + 1} {kind:5s} {shown}  ({r['load']})", flush=True)
    med = {k: H.median_of(runs["calls"], k) for k in ("import_s", "first_s", "second_s")}
    med["floor_s"] = H.median_of(runs["floor"], "seconds")
    per_rep = [c["first_s"] / c["second_s"] for c in runs["calls"]]
    ratios = {"first_over_second": med["first_s"] / med["second_s"],
              "first_over_floor": med["first_s"] / med["floor_s"],
              "second_over_floor": med["second_s"] / med["floor_s"], "first_over_second_each": per_rep}
    rows = [["first call", f"{med['first_s']:.1f} s", f"{ratios['first_over_second']:.3f}x the second",
             f"{ratios['first_over_floor']:.3f}x the floor",
             f"<= {GOAL}x both: {H.verdict(max(ratios['first_over_second'], ratios['first_over_floor']) <= GOAL)}"],
            ["second call", f"{med['second_s']:.1f} s", "", f"{ratios['second_over_floor']:.3f}x the floor", ""],
            ["floor (Gram + eigvalsh, float64)", f"{med['floor_s']:.1f} s", "", "", ""],
            ["import toolkit", f"{med['import_s']:.2f} s", "", "", ""]]
    print(H.table(rows, ["run", "median", "against the second", "against the floor", "goal"]))
    print("first / second within each process: " + ", ".join(f"{r:.3f}" for r in per_rep))
    if not args.no_save:
        results.save({"machine": H.machine(), "reps": args.reps, "toolkit_env": args.toolkit_env, "goal": GOAL,
                      "median": med, "ratios": ratios, "runs": runs, "cells": runs["calls"][0]["cells"]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
