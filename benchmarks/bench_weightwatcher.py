"""Benchmark 1: the toolkit against WeightWatcher on the embedded SmolLM2-135M.

Each side runs in its own fresh process, ``--reps`` times, alternating; the
table shows medians.

  toolkit         ``toolkit.weight_stats(<gguf>, cache=False)``: every
                  registered weight metric, streamed from the GGUF file
                  (``benchmarks/.user-venv``, below).
  weightwatcher   ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``
                  then ``WeightWatcher(model=model).analyze()`` with its
                  defaults (weightwatcher 0.7.7, in its own venv).

  toolkit CLI     ``python -m toolkit weights <gguf> -o out.nc -q`` with an empty cache folder: the
                  command a user runs, timed as a whole process from outside (its NetCDF checked
                  against the first child's figures, 1e-12 relative).

Times: "work" is measured inside the process from just before the first
call that touches the file (``weight_stats``; ``from_pretrained``) to the
result; "process" is the whole child process seen from outside (interpreter
start and every import included). Peak RSS is each child's own high-water
mark (VmHWM). Agreement is computed on the matrices both report, matched by
parameter name: stable rank and sigma_max (WeightWatcher's ``spectral_norm``
is sigma_max², so its square root is compared) within 1e-3 relative; alpha
within 0.1 absolute (both follow the WWFit convention).

The toolkit runs in ``benchmarks/.user-venv`` (``--toolkit-env user``, the default; created on first use:
``pip install torch==2.13.0``, ``pip install -e .``, the embedded model's package): this checkout with its
runtime dependencies only, as a user's ``pip install`` gives it, so the whole-process time carries no test
extra (the project venv's dask is imported by xarray with a process's first Dataset: about 0.4 s here).
WeightWatcher and its dependencies live in ``benchmarks/.ww-venv`` (created
on first use: ``python -m venv``, then ``pip install torch==2.13.0`` — the
CPU wheel — and ``pip install weightwatcher==0.7.7 transformers gguf
accelerate``), so they never touch the project's environment.

A third child times a fresh kernel's cached re-run: ``weight_stats(<gguf>)``
from call to Dataset in a new process whose cache folder one untimed run has
filled (plan and every cell cached; ``import toolkit`` and xarray's first
Dataset off the clock, as in ``bench_cold_start.py``).

Targets (issues 8, 19 and 47): work >= 5x, the CLI's whole process >= 8x (issue 47 names the command line's
process; the first child's whole process is shown beside it), peak RSS <= 1/3 of
WeightWatcher's, >= 95 % agreement, cached re-run < 0.5 s.

Usage::

    .venv/bin/python benchmarks/bench_weightwatcher.py [--reps 3] [--device cpu|cuda]
        [--precision float64|float32] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

HERE = Path(__file__).resolve().parent
WW_VENV = HERE / ".ww-venv"
WW_PY = WW_VENV / "bin" / "python"
WW_PACKAGES = [["torch==2.13.0"], ["weightwatcher==0.7.7", "transformers", "gguf", "accelerate"]]

TARGET_SPEEDUP = 5.0
TARGET_PROCESS_SPEEDUP = 8.0
TARGET_CACHED_S = 0.5
TARGET_RSS_SHARE = 1 / 3
TARGET_AGREE = 0.95
RTOL = 1e-3
ALPHA_ATOL = 0.1


def ensure_ww_venv() -> None:
    """Create benchmarks/.ww-venv with WeightWatcher 0.7.7 when it is missing."""
    H.ensure_venv(WW_VENV, WW_PACKAGES, "import weightwatcher, transformers, gguf, torch",
                  "weightwatcher 0.7.7, CPU torch")


def versions_of(python: str, packages: tuple[str, ...]) -> dict:
    """The installed versions of ``packages`` in the environment of ``python`` (what each side ran with: a
    newer ``transformers`` loads the GGUF faster, and WeightWatcher's whole time with it)."""
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
    return json.loads(subprocess.run([python, "-c", code, *packages], capture_output=True, text=True,
                                     check=True).stdout)


# ---------------------------------------------------------------- children


def child_toolkit(gguf: str, device: str, out: str, threads: int | None, precision: str = "float64") -> None:
    t_start = time.perf_counter()
    import torch

    import toolkit

    H.set_threads(threads)
    t0 = time.perf_counter()
    ds = toolkit.weight_stats(gguf, device=device, progress=False, cache=False, precision=precision)
    work = time.perf_counter() - t0
    rows = []
    names = ds.parameter_name.values
    values = {v: ds[v].values for v in ("spectral_norm", "stable_rank", "alpha")}
    for i, layer in enumerate(ds.layer.values):
        for j, comp in enumerate(ds.component.values):
            if names[i, j]:
                rows.append({"name": str(names[i, j]).removesuffix(".weight"), "layer": int(layer),
                             "component": str(comp), **{v: float(a[i, j]) for v, a in values.items()}})
    Path(out).write_text(json.dumps(rows))
    H.emit(seconds=work, total_in_process=time.perf_counter() - t_start, matrices=len(rows),
           threads=torch.get_num_threads())


def child_ww(gguf: str, device: str, out: str, threads: int | None) -> None:
    t_start = time.perf_counter()
    import logging

    import torch
    import weightwatcher as ww
    from transformers import AutoModelForCausalLM

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    H.set_threads(threads)
    path = Path(gguf)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    if device != "cpu":
        model = model.to(device)
    load = time.perf_counter() - t0
    details = ww.WeightWatcher(model=model).analyze()
    work = time.perf_counter() - t0
    rows = []
    for _, r in details.iterrows():
        rows.append({"name": str(r.get("longname", r.get("name"))), "layer_id": int(r["layer_id"]),
                     "M": int(r["M"]), "N": int(r["N"]),
                     **{k: float(r[k]) for k in ("spectral_norm", "stable_rank", "alpha") if k in r}})
    Path(out).write_text(json.dumps(rows))
    H.emit(seconds=work, load_s=load, total_in_process=time.perf_counter() - t_start, matrices=len(rows),
           threads=torch.get_num_threads())


def child_cached(gguf: str, device: str, precision: str) -> None:
    """A fresh kernel's cached call (``$TOOLKIT_CACHE_DIR`` filled by an earlier run)."""
    import time as _time

    import xarray as xr

    import toolkit

    xr.Dataset({"x": ("a", [1.0])})  # xarray's first Dataset imports dask.array: a one-time cost, off the clock
    t0 = _time.perf_counter()
    ds = toolkit.weight_stats(gguf, device=device, progress=False, precision=precision)
    H.emit(seconds=_time.perf_counter() - t0, cells=int(ds.frobenius_norm.notnull().sum()))


def cached_rerun(me: str, args, env: dict, python: str) -> dict:
    """One untimed run into a fresh cache folder, then ``--reps`` timed fresh-process re-runs (by ``python``)."""
    import shutil

    folder = Path(tempfile.mkdtemp(prefix="bench-ww-cache-"))
    try:
        cmd = [python, me, "--child", "cached", "--gguf", args.gguf, "--device", args.device,
               "--precision", args.precision]
        env = {**env, "TOOLKIT_CACHE_DIR": str(folder)}
        first = H.run_child(cmd, env=env)
        runs = [H.run_child(cmd, env=env) for _ in range(max(1, args.reps))]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"  cached re-run: first (filling the cache) {first['seconds']:.1f} s, then "
          + ", ".join(f"{r['seconds']:.3f} s" for r in runs), flush=True)
    return {"fill_s": first["seconds"], "seconds": H.median_of(runs, "seconds"), "runs": runs}


def cli_run(python: str, gguf: str, folder: str, env: dict) -> dict:
    """``python -m toolkit weights <gguf> -o <folder>/cli.nc -q`` with an empty cache folder, timed from outside."""
    import shutil

    cache = Path(tempfile.mkdtemp(prefix="bench-ww-cli-cache-"))
    out = Path(folder) / "cli.nc"
    try:
        t0 = time.perf_counter()
        done = subprocess.run([python, "-m", "toolkit", "weights", gguf, "-o", str(out), "-q"], cwd=folder,
                              env={**os.environ, **env, "TOOLKIT_CACHE_DIR": str(cache)}, capture_output=True,
                              text=True)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the CLI failed (rc {done.returncode}): {done.stderr[-3000:]}")
    return {"process_s": wall, "output": str(out)}


def check_cli_output(path: str, rows: list[dict]) -> int:
    """The CLI's NetCDF against the first child's figures: every matrix, stable rank and sigma_max within 1e-12
    relative. Returns the number of matrices compared; raises ``AssertionError`` on a difference."""
    import xarray as xr

    with xr.open_dataset(path) as ds:
        for r in rows:
            cell = ds.sel(layer=r["layer"], component=r["component"])
            for name in ("stable_rank", "spectral_norm"):
                got = float(cell[name])
                assert abs(got - r[name]) <= 1e-12 * abs(r[name]), (r["name"], name, got, r[name])
    return len(rows)


# ---------------------------------------------------------------- driver


def agreement(ours: list[dict], theirs: list[dict]) -> dict:
    """Share of matched matrices within tolerance, per metric."""
    by_name = {r["name"]: r for r in theirs}
    matched = [(o, by_name[o["name"]]) for o in ours if o["name"] in by_name]
    out = {"matched": len(matched), "ours": len(ours), "theirs": len(theirs), "metrics": {}}

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-300)

    checks = {
        "stable_rank": lambda o, t: rel(o["stable_rank"], t["stable_rank"]) <= RTOL,
        "spectral_norm (sigma_max)": lambda o, t: rel(o["spectral_norm"], math.sqrt(t["spectral_norm"])) <= RTOL,
        "alpha": lambda o, t: abs(o["alpha"] - t["alpha"]) <= ALPHA_ATOL,
    }
    worst = {
        "stable_rank": lambda o, t: rel(o["stable_rank"], t["stable_rank"]),
        "spectral_norm (sigma_max)": lambda o, t: rel(o["spectral_norm"], math.sqrt(t["spectral_norm"])),
        "alpha": lambda o, t: abs(o["alpha"] - t["alpha"]),
    }
    for name, ok in checks.items():
        pairs = [(o, t) for o, t in matched if all(math.isfinite(v) for v in (
            o[_our_key(name)], t.get(_our_key(name), float("nan"))))]
        good = sum(1 for o, t in pairs if ok(o, t))
        devs = sorted(worst[name](o, t) for o, t in pairs)
        out["metrics"][name] = {"compared": len(pairs), "agree": good,
                                "share": good / len(pairs) if pairs else float("nan"),
                                "max_dev": devs[-1] if devs else float("nan"),
                                "median_dev": devs[len(devs) // 2] if devs else float("nan"),
                                "disagree": [o["name"] for o, t in pairs if not ok(o, t)][:5]}
    return out


def _our_key(name: str) -> str:
    return "spectral_norm" if name.startswith("spectral_norm") else name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per side (median reported)")
    ap.add_argument("--device", default="cpu", help="device for the spectral work on both sides: cpu or cuda")
    ap.add_argument("--threads", type=int, default=None,
                    help="thread budget of both sides (torch, OpenMP, MKL, OpenBLAS); default: every core")
    ap.add_argument("--gguf", default=None, help="GGUF file (default: the embedded SmolLM2-135M Q4_1)")
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"],
                    help="the toolkit's spectral precision (default float64)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    ap.add_argument("--toolkit-env", default="user", choices=["user", "project"],
                    help="the toolkit side's environment: user (default; benchmarks/.user-venv, this checkout with "
                         "its runtime dependencies only, as pip installs it) or project (.venv, test extras included)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child == "toolkit":
        child_toolkit(args.gguf, args.device, args.out, args.threads, args.precision)
        return 0
    if args.child == "cached":
        child_cached(args.gguf, args.device, args.precision)
        return 0
    if args.child == "ww":
        child_ww(args.gguf, args.device, args.out, args.threads)
        return 0

    rec = H.Results("weightwatcher" + ("" if args.precision == "float64" else f"_{args.precision}")
                    + ("" if args.device == "cpu" else f"_{args.device}"))
    if args.gguf is None:
        code = "from toolkit.bundled import default_model_path as p; print(p())"
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        args.gguf = found.stdout.strip()
    ensure_ww_venv()
    toolkit_py = H.toolkit_python(args.toolkit_env)
    versions = {side: versions_of(py, pkgs) for side, py, pkgs in (
        ("toolkit", toolkit_py, ("torch", "numpy", "scipy", "xarray", "gguf")),
        ("weightwatcher", str(WW_PY), ("weightwatcher", "torch", "transformers", "gguf", "accelerate", "numpy")))}
    me = str(Path(__file__).resolve())
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", **H.thread_env(args.threads)}
    print(f"machine: {H.machine()}\n{H.load()} at start; device {args.device}; {args.reps} reps per side; "
          f"threads {args.threads or 'all cores'}")
    print(f"model: {args.gguf}\ntoolkit environment: {args.toolkit_env} ({toolkit_py})")
    runs = {"toolkit": [], "weightwatcher": [], "toolkit CLI": []}
    with tempfile.TemporaryDirectory(prefix="bench-ww-") as tmp:
        outs = {"toolkit": f"{tmp}/toolkit.json", "weightwatcher": f"{tmp}/ww.json"}
        pythons = {"toolkit": toolkit_py, "weightwatcher": str(WW_PY)}
        children = {"toolkit": "toolkit", "weightwatcher": "ww"}
        for rep in range(args.reps):
            for side in ("weightwatcher", "toolkit") if rep % 2 else ("toolkit", "weightwatcher"):
                r = H.run_child([pythons[side], me, "--child", children[side], "--gguf", args.gguf,
                                 "--device", args.device, "--out", outs[side]]
                                + (["--precision", args.precision] if side == "toolkit" else [])
                                + (["--threads", str(args.threads)] if args.threads else []), env=env, cwd=tmp)
                runs[side].append(r)
                print(f"  rep {rep + 1} {side:13s} work {r['seconds']:6.1f} s  process {r['process_s']:6.1f} s  "
                      f"peak RSS {H.fmt_bytes(r['peak_rss'])}", flush=True)
                if side == "toolkit":
                    runs["toolkit CLI"].append(cli_run(toolkit_py, args.gguf, tmp, env))
                    print(f"  rep {rep + 1} toolkit CLI   process {runs['toolkit CLI'][-1]['process_s']:6.1f} s",
                          flush=True)
        ours = json.loads(Path(outs["toolkit"]).read_text())
        theirs = json.loads(Path(outs["weightwatcher"]).read_text())
        cli_checked = check_cli_output(runs["toolkit CLI"][-1]["output"], ours)
    cached = cached_rerun(me, args, env, toolkit_py)
    figures = report(runs, agreement(ours, theirs), args, cached) | {"versions": versions,
                                                                     "cli_matrices_checked": cli_checked}
    rec.save(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def report(runs: dict, agree: dict, args, cached: dict) -> dict:
    cli = runs.pop("toolkit CLI")
    med = {side: {k: H.median_of(rs, k) for k in ("seconds", "process_s")} for side, rs in runs.items()}
    med["toolkit"]["cli_process_s"] = H.median_of(cli, "process_s")
    rss = {side: max(r["peak_rss"] for r in rs) for side, rs in runs.items()}
    speed_work = med["weightwatcher"]["seconds"] / med["toolkit"]["seconds"]
    speed_child = med["weightwatcher"]["process_s"] / med["toolkit"]["process_s"]
    speed_proc = med["weightwatcher"]["process_s"] / med["toolkit"]["cli_process_s"]
    rss_share = rss["toolkit"] / rss["weightwatcher"]
    rows = [
        ["time, work (file -> result)", f"{med['toolkit']['seconds']:.1f} s",
         f"{med['weightwatcher']['seconds']:.1f} s", f"{speed_work:.1f}x faster",
         f">= {TARGET_SPEEDUP:g}x {H.verdict(speed_work >= TARGET_SPEEDUP)}"],
        ["time, whole process: python -m toolkit weights", f"{med['toolkit']['cli_process_s']:.1f} s",
         f"{med['weightwatcher']['process_s']:.1f} s", f"{speed_proc:.1f}x faster",
         f">= {TARGET_PROCESS_SPEEDUP:g}x {H.verdict(speed_proc >= TARGET_PROCESS_SPEEDUP)}"],
        ["time, whole process: the work child", f"{med['toolkit']['process_s']:.1f} s",
         f"{med['weightwatcher']['process_s']:.1f} s", f"{speed_child:.1f}x faster", ""],
        ["cached re-run, fresh process (call -> Dataset)", f"{cached['seconds']:.3f} s", "", "",
         f"< {TARGET_CACHED_S} s {H.verdict(cached['seconds'] < TARGET_CACHED_S)}"],
        ["peak RSS", H.fmt_bytes(rss["toolkit"]), H.fmt_bytes(rss["weightwatcher"]), f"{rss_share:.2f} of WW",
         f"<= 1/3 {H.verdict(rss_share <= TARGET_RSS_SHARE)}"],
    ]
    ww_load = H.median_of(runs["weightwatcher"], "load_s")
    for name, m in agree["metrics"].items():
        tol = f"{ALPHA_ATOL} abs" if name == "alpha" else f"{RTOL:g} rel"
        rows.append([f"agree: {name} ({tol})", f"{m['agree']}/{m['compared']} matrices", "",
                     f"{m['share'] * 100:.1f} % (max dev {m['max_dev']:.2g})",
                     f">= 95 % {H.verdict(m['share'] >= TARGET_AGREE)}"])
    print()
    print(H.table(rows, ["figure", "toolkit", "WeightWatcher", "ratio", "target"]))
    print("The speed target is read on the work time: end to end from the GGUF file to the result, "
          "WeightWatcher's from_pretrained load included.")
    print(f"WeightWatcher's from_pretrained alone: {ww_load:.1f} s (median). Matched {agree['matched']} matrices "
          f"by name (toolkit {agree['ours']}, WeightWatcher {agree['theirs']} layers; "
          "lm_head is WeightWatcher's only).")
    for name, m in agree["metrics"].items():
        if m["disagree"]:
            print(f"  {name}: first disagreeing: {', '.join(m['disagree'])}")
    print(f"{H.load()} at end")
    verdicts = [speed_work >= TARGET_SPEEDUP, speed_proc >= TARGET_PROCESS_SPEEDUP, rss_share <= TARGET_RSS_SHARE,
                cached["seconds"] < TARGET_CACHED_S] + [m["share"] >= TARGET_AGREE for m in agree["metrics"].values()]
    print("all targets met: PASS" if all(verdicts) else "some targets missed: MISS (see the table)")
    return {"machine": H.machine(), "load_at_end": H.load(), "device": args.device, "reps": args.reps,
            "precision": args.precision, "toolkit_env": args.toolkit_env,
            "cached_rerun": {k: v for k, v in cached.items() if k != "runs"},
            "threads": args.threads or "all cores",
            "median": med, "peak_rss": rss, "speedup_work": speed_work, "speedup_process": speed_proc,
            "speedup_process_child": speed_child,
            "rss_share": rss_share, "agreement": agree, "ww_load_s": ww_load,
            "all": {side: rs for side, rs in runs.items()} | {"toolkit CLI": cli}}


if __name__ == "__main__":
    sys.exit(main())
