"""Benchmark: every WeightWatcher ``analyze()`` column of a weight matrix, toolkit against WeightWatcher 0.7.7.

Each side runs once in its own process, on the same GGUF file:

  toolkit         ``toolkit.weight_stats(<gguf>, metrics=[...], cache=False)`` with the ESD
                  columns (project venv); the randomized ones once per seed (``--seeds``).
  weightwatcher   ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``, then
                  ``WeightWatcher(model=model).analyze(mp_fit=True, randomize=True)``
                  (weightwatcher 0.7.7 in ``benchmarks/.ww-venv``, created on first use by
                  ``bench_weightwatcher.ensure_ww_venv``).

Matrices are matched by parameter name (WeightWatcher's ``longname``). The
table gives, per column, the share of matched matrices that agree and the
largest deviation. Deterministic columns agree when
``|ours - ww| <= 1e-6 |ww|`` or ``<= 1e-9`` (both undefined also agrees:
NaN here, -1 there); target >= 99 %. The randomized columns
(``rand_distance``, ``rand_num_spikes``) come from a random shuffle of the
entries on both sides (WeightWatcher's is unseeded), so they agree *in
distribution*: a matrix agrees when WeightWatcher's one sample lies in the
99 % prediction interval of the toolkit's ``--seeds`` seeds,
``|ww - mean| <= t(0.995, K-1) sd sqrt(1 + 1/K)`` (plus 1e-9 for the
distance, plus one spike for the count); target >= 95 %. Their row also
gives the means over all matrices of both sides.

``--fix-fingers clip_xmax`` compares the fit columns of that mode instead:
``weight_stats(fit=FitOptions(fix_fingers="clip_xmax"))`` against
``analyze(fix_fingers="clip_xmax")``, same tolerance. (``xmin_peak``:
WeightWatcher 0.7.7 fails it on every matrix, see ``bench_xmin_peak.py``.)

``--erg`` compares the det X = 1 / ERG columns instead: the opt-in ``erg_*`` metrics
(``toolkit.metrics.erg``) against ``analyze(ERG=True)``'s ``detX_num``, ``ERG_gap``,
``detX_val`` and ``detX_val_unrescaled``, same tolerance.

``--ww-cache FILE`` keeps WeightWatcher's rows (its full run takes tens of
minutes on 2 cores): read from FILE when it exists, else written there.
``--ww-golden`` reads them from the committed golden table instead
(``tests/data/ww_<model>_<run>.csv``, written by ``benchmarks/ww_golden.py``):
WeightWatcher is not run, and the table's options must be the run's.

The figures are written to ``benchmarks/results/ww_columns_<model>_<run>.json``
(``benchmarks/publish.py`` renders the README's agreement table from them).

Usage::

    .venv/bin/python benchmarks/bench_ww_columns.py [--model smollm2|gemma3|minilm|PATH.gguf] [--seeds 5]
        [--no-random] [--no-mp] [--fix-fingers clip_xmax | --erg] [--ww-cache FILE | --ww-golden] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
import bench_weightwatcher as BW  # noqa: E402

# toolkit metric -> WeightWatcher column
DETERMINISTIC = {
    "alpha": "alpha", "alpha_xmin": "xmin", "alpha_xmax": "xmax", "alpha_ks_distance": "D",
    "alpha_sigma": "sigma", "num_pl_spikes": "num_pl_spikes", "alpha_weighted": "alpha_weighted",
    "log_norm": "log_norm", "log_spectral_norm": "log_spectral_norm", "log_alpha_norm": "log_alpha_norm",
    "matrix_rank": "matrix_rank", "rank_loss": "rank_loss", "spectral_entropy": "entropy",
    "mp_softrank": "mp_softrank", "mp_num_spikes": "num_spikes", "mp_bulk_max": "bulk_max",
}
RANDOMIZED = {"rand_distance": "rand_distance", "rand_num_spikes": "rand_num_spikes"}
RTOL, ATOL = 1e-6, 1e-9
TARGET, TARGET_RANDOM = 0.99, 0.95
PREDICTION = 0.99  # two-sided prediction interval of the randomized columns
RANDOM_SLACK = {"rand_distance": 1e-9, "rand_num_spikes": 1.0}
MODELS = {"smollm2": "default_model_path", "gemma3": "gemma3_path", "minilm": "minilm_dir"}
# xmin_peak is not here: WeightWatcher 0.7.7 fails it on every matrix (benchmarks/bench_xmin_peak.py
# compares the toolkit's with the powerlaw package's fit that WeightWatcher means to call)
FIX_FINGERS = ("clip_xmax",)
# the columns of a fix-fingers run: the fit and what derives from it, and clip_xmax's finger count
FIT_COLUMNS = ("alpha", "alpha_xmin", "alpha_xmax", "alpha_ks_distance", "alpha_sigma", "num_pl_spikes",
               "alpha_weighted", "log_alpha_norm")


MP_COLUMNS = ("mp_softrank", "mp_num_spikes", "mp_bulk_max")
# the columns of an ERG=True run (toolkit metric -> WeightWatcher column)
ERG_COLUMNS = {"erg_num_spikes": "detX_num", "erg_gap": "ERG_gap", "erg_xmin": "detX_val",
               "erg_xmin_rescaled": "detX_val_unrescaled"}
# WeightWatcher columns where -1 is a value, not its mark of a failed fit (a gap of -1 spike)
SIGNED = {"ERG_gap"}


def columns(fix_fingers: str | None, mp: bool = True, erg: bool = False) -> dict:
    """toolkit metric -> WeightWatcher column compared in a run (``mp=False``: without the MP fit's;
    ``erg``: the det X = 1 / ERG columns alone)."""
    if erg:
        return dict(ERG_COLUMNS)
    if fix_fingers is None:
        return {k: v for k, v in DETERMINISTIC.items() if mp or k not in MP_COLUMNS}
    return {k: DETERMINISTIC[k] for k in FIT_COLUMNS}


# ---------------------------------------------------------------- children


def _metric_names(seeds: int, random: bool, fix_fingers: str | None = None, mp: bool = True,
                  erg: bool = False) -> list[str]:
    """The metric names to compute: the ESD columns, opt-in ones included, and the randomized ones
    once per seed (seed 0 is the registered metric; the others are registered here, in this process)."""
    from toolkit.metrics import get_metric, register_metric

    names = list(columns(fix_fingers, mp, erg))
    if random:
        for base in RANDOMIZED:
            m = get_metric(base)
            names.append(base)
            for seed in range(1, seeds):
                register_metric(f"{base}_seed{seed}", m.func, long_name=m.long_name, description=m.description,
                                reference=m.reference, needs_singular_values=True, options={"seed": seed})
                names.append(f"{base}_seed{seed}")
    return names


def child_toolkit(gguf: str, out: str, seeds: int, random: bool, threads: int | None,
                  fix_fingers: str | None = None, mp: bool = True, erg: bool = False) -> None:
    import toolkit

    H.set_threads(threads)
    names = _metric_names(seeds, random, fix_fingers, mp, erg)
    t0 = time.perf_counter()
    ds = toolkit.weight_stats(gguf, metrics=names, progress=False, cache=False,
                              fit=toolkit.FitOptions(fix_fingers=fix_fingers))
    work = time.perf_counter() - t0
    rows = []
    pnames = ds.parameter_name.values
    arrays = {n: ds[n].values for n in names}
    for i in range(ds.sizes["layer"]):
        for j in range(ds.sizes["component"]):
            if pnames[i, j]:
                rows.append({"name": str(pnames[i, j]).removesuffix(".weight"),
                             **{n: float(a[i, j]) for n, a in arrays.items()}})
    Path(out).write_text(json.dumps(rows))
    H.emit(seconds=work, matrices=len(rows))


def ww_options(fix_fingers: str | None, random: bool, mp: bool = True, erg: bool = False) -> dict:
    """WeightWatcher's ``analyze()`` keywords of a run: the default analysis (with the MP fit unless
    ``mp`` is False), the fix-fingers fit, or the default fit with the ERG columns."""
    if erg:
        return {"ERG": True}
    if fix_fingers is None:
        return {"mp_fit": mp, "randomize": random}
    return {"fix_fingers": fix_fingers}


def child_ww(gguf: str, out: str, random: bool, threads: int | None, fix_fingers: str | None = None,
             mp: bool = True, erg: bool = False) -> None:
    import logging

    import torch
    import weightwatcher as ww
    from transformers import AutoModelForCausalLM

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    H.set_threads(threads)
    path = Path(gguf)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    details = ww.WeightWatcher(model=model).analyze(**ww_options(fix_fingers, random, mp, erg))
    work = time.perf_counter() - t0
    cols = list(columns(fix_fingers, mp, erg).values()) + (
        list(RANDOMIZED.values()) if random and not fix_fingers else [])
    rows = []
    for _, r in details.iterrows():
        rows.append({"name": str(r.get("longname", r.get("name"))), "M": int(r["M"]), "N": int(r["N"]),
                     **{c: float(r[c]) if c in r and r[c] is not None else math.nan for c in cols}})
    Path(out).write_text(json.dumps(rows))
    H.emit(seconds=work, matrices=len(rows))


# ---------------------------------------------------------------- agreement


def _undefined(v: float, ww_side: bool) -> bool:
    return not math.isfinite(v) or (ww_side and v == -1.0)


def deterministic_agreement(pairs: list[tuple[dict, dict]], compared: dict | None = None) -> dict:
    out = {}
    for ours_key, ww_key in (compared or DETERMINISTIC).items():
        if ours_key not in pairs[0][0]:
            continue
        agree, devs, bad = 0, [], []
        for o, t in pairs:
            a, b = o[ours_key], t.get(ww_key, math.nan)
            ua, ub = _undefined(a, False), _undefined(b, ww_key not in SIGNED)
            if ua or ub:
                ok = ua and ub
                if not ok:
                    devs.append(math.inf)
            else:
                dev = abs(a - b)
                rel = dev / abs(b) if b else (0.0 if dev == 0 else math.inf)
                ok = rel <= RTOL or dev <= ATOL
                devs.append(min(rel, dev))
            agree += ok
            if not ok:
                bad.append(f"{o['name']} ({a:.9g} vs {b:.9g})")
        out[ours_key] = {"ww": ww_key, "compared": len(pairs), "agree": agree, "share": agree / len(pairs),
                         "max_dev": max(devs) if devs else 0.0, "disagree": bad[:4]}
    return out


def random_agreement(pairs: list[tuple[dict, dict]], seeds: int) -> dict:
    from scipy import stats

    half = stats.t.ppf(0.5 + PREDICTION / 2, max(1, seeds - 1)) * math.sqrt(1 + 1 / seeds)
    out = {}
    for ours_key, ww_key in RANDOMIZED.items():
        if ours_key not in pairs[0][0]:
            continue
        names = [ours_key] + [f"{ours_key}_seed{k}" for k in range(1, seeds)]
        agree, zs, ours_means, theirs, bad = 0, [], [], [], []
        for o, t in pairs:
            vals = [o[n] for n in names if math.isfinite(o[n])]
            b = t.get(ww_key, math.nan)
            if not vals or _undefined(b, True):
                agree += bool((not vals) and _undefined(b, True))
                continue
            mean = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / max(1, len(vals) - 1))
            ok = bool(abs(b - mean) <= half * sd + RANDOM_SLACK[ours_key])
            agree += ok
            zs.append(abs(b - mean) / sd if sd > 0 else (0.0 if b == mean else math.inf))
            ours_means.append(mean)
            theirs.append(b)
            if not ok:
                bad.append(f"{o['name']} (ww {b:.4g}, ours {mean:.4g} +- {sd:.2g})")
        m_ours = sum(ours_means) / len(ours_means) if ours_means else math.nan
        m_ww = sum(theirs) / len(theirs) if theirs else math.nan
        out[ours_key] = {"ww": ww_key, "compared": len(pairs), "agree": agree, "share": agree / len(pairs),
                         "mean_ours": m_ours, "mean_ww": m_ww, "max_z": max(zs) if zs else math.nan,
                         "disagree": bad[:4]}
    return out


# ---------------------------------------------------------------- driver


def model_path(model: str) -> str:
    if model in MODELS:
        code = f"from toolkit.bundled import {MODELS[model]} as p; print(p())"
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        return found.stdout.strip()
    return model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 (embedded), gemma3 (bundled) or a .gguf path")
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the toolkit's randomized columns")
    ap.add_argument("--no-random", action="store_true", help="skip the randomized columns on both sides")
    ap.add_argument("--threads", type=int, default=None, help="thread budget of both sides")
    ap.add_argument("--json", type=Path, default=None, help="also write the table and figures to this JSON file")
    ap.add_argument("--ww-cache", type=Path, default=None, help="reuse (or save) WeightWatcher's rows in this file")
    ap.add_argument("--ww-golden", action="store_true",
                    help="WeightWatcher's rows from the committed tests/data/ww_<model>_<run>.csv (not run)")
    ap.add_argument("--no-mp", action="store_true", help="skip the Marchenko-Pastur fit on both sides")
    ap.add_argument("--fix-fingers", choices=FIX_FINGERS, default=None,
                    help="compare the fit columns of this fix-fingers mode (no MP fit, no randomized columns)")
    ap.add_argument("--erg", action="store_true",
                    help="compare the det X = 1 / ERG columns of analyze(ERG=True) (no MP fit, no randomized columns)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--gguf", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.erg and args.fix_fingers:
        ap.error("--erg compares the default fit's ERG columns: leave out --fix-fingers")
    random = not args.no_random and args.fix_fingers is None and not args.erg
    mp = not args.no_mp and args.fix_fingers is None and not args.erg
    if args.child == "toolkit":
        child_toolkit(args.gguf, args.out, args.seeds, random, args.threads, args.fix_fingers, mp, args.erg)
        return 0
    if args.child == "ww":
        child_ww(args.gguf, args.out, random, args.threads, args.fix_fingers, mp, args.erg)
        return 0

    run = "erg" if args.erg else args.fix_fingers or "default"
    rec = H.Results(f"ww_columns_{Path(args.model).stem if args.model not in MODELS else args.model}_{run}")
    gguf = model_path(args.model)
    golden = golden_rows(args.model, run, mp, random) if args.ww_golden else None
    if golden is None:
        BW.ensure_ww_venv()
    me = str(Path(__file__).resolve())
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", **H.thread_env(args.threads)}
    print(f"machine: {H.machine()}\n{H.load()} at start; model {gguf}; seeds {args.seeds}; randomized "
          f"{'on' if random else 'off'}; fix_fingers {args.fix_fingers or 'off'} (WeightWatcher analyze("
          f"{', '.join(f'{k}={v!r}' for k, v in ww_options(args.fix_fingers, random, mp, args.erg).items())}))",
          flush=True)
    extra = ["--seeds", str(args.seeds)] + (["--no-random"] if not random else []) + (
        ["--threads", str(args.threads)] if args.threads else []) + (
        ["--fix-fingers", args.fix_fingers] if args.fix_fingers else []) + (["--no-mp"] if not mp else []) + (
        ["--erg"] if args.erg else [])
    with tempfile.TemporaryDirectory(prefix="bench-ww-cols-") as tmp:
        res = {}
        for side, py, child in (("toolkit", sys.executable, "toolkit"), ("weightwatcher", str(BW.WW_PY), "ww")):
            if side == "weightwatcher" and golden is not None:
                res[side] = golden
                print(f"  {side:13s} rows read from the golden table ({golden[0]['seconds']:.0f} s when run)")
                continue
            if side == "weightwatcher" and args.ww_cache and args.ww_cache.is_file():
                res[side] = tuple(json.loads(args.ww_cache.read_text()))
                print(f"  {side:13s} rows read from {args.ww_cache} (work {res[side][0]['seconds']:.1f} s when run)")
                continue
            out = f"{tmp}/{side}.json"
            r = H.run_child([py, me, "--child", child, "--gguf", gguf, "--out", out] + extra, env=env, cwd=tmp,
                            timeout=7200)
            res[side] = (r, json.loads(Path(out).read_text()))
            if side == "weightwatcher" and args.ww_cache:
                args.ww_cache.write_text(json.dumps(res[side]))
            print(f"  {side:13s} work {r['seconds']:7.1f} s  process {r['process_s']:7.1f} s  "
                  f"{r['matrices']} matrices  peak RSS {H.fmt_bytes(r['peak_rss'])}", flush=True)
    ours, theirs = res["toolkit"][1], res["weightwatcher"][1]
    by_name = {t["name"]: t for t in theirs}
    pairs = [(o, by_name[o["name"]]) for o in ours if o["name"] in by_name]
    if not pairs:
        print("no matrix matched by name")
        return 1
    det = deterministic_agreement(pairs, columns(args.fix_fingers, mp, args.erg))
    rnd = random_agreement(pairs, args.seeds) if random else {}
    rows = [[f"{k} [{m['ww']}]", f"{m['agree']}/{m['compared']}", f"{m['share'] * 100:.1f} %", f"{m['max_dev']:.2g}",
             f">= 99 % {H.verdict(m['share'] >= TARGET)}"] for k, m in det.items()]
    rows += [[f"{k} [{m['ww']}] (in distribution)", f"{m['agree']}/{m['compared']}", f"{m['share'] * 100:.1f} %",
              f"means {m['mean_ours']:.4g} / {m['mean_ww']:.4g}", f">= 95 % {H.verdict(m['share'] >= TARGET_RANDOM)}"]
             for k, m in rnd.items()]
    print()
    print(H.table(rows, ["column [WeightWatcher]", "agree", "share", "max deviation", "target"]))
    print(f"Matched {len(pairs)} matrices by name (toolkit {len(ours)}, WeightWatcher {len(theirs)}). Deviation: "
          f"min(relative, absolute); inf = defined on one side only. Agreement: {RTOL:g} relative or {ATOL:g} "
          f"absolute; randomized: in the {PREDICTION:.0%} prediction interval of {args.seeds} seeds.")
    for k, m in {**det, **rnd}.items():
        if m["disagree"]:
            print(f"  {k}: {'; '.join(m['disagree'])}")
    print(f"{H.load()} at end")
    figures = {"model": args.model, "run": run, "ww_options": ww_options(args.fix_fingers, random, mp, args.erg),
               "seeds": args.seeds if random else 0, "rtol": RTOL, "atol": ATOL, "matched": len(pairs),
               "deterministic": det, "random": rnd, "seconds": {s: res[s][0]["seconds"] for s in res},
               "ww_source": "golden table" if golden is not None else "run"}
    rec.save(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=float))
    return 0


def golden_rows(model: str, run: str, mp: bool, random: bool) -> tuple[dict, list[dict]]:
    """WeightWatcher's side from the committed golden table, in the shape ``child_ww`` writes."""
    sys.path.insert(0, str(H.ROOT / "tests"))
    from _golden import read_golden

    header, rows = read_golden(f"ww_{model}_{run}.csv")
    options = header["analyze_options"]
    if run == "default" and (bool(options.get("mp_fit")) < mp or bool(options.get("randomize")) < random):
        raise SystemExit(f"ww_{model}_{run}.csv was written with {options}: pass --no-mp / --no-random, or rerun "
                         "benchmarks/ww_golden.py")
    if run == "erg" and not options.get("ERG"):
        raise SystemExit(f"ww_{model}_{run}.csv was written with {options}, without ERG=True: rerun "
                         "benchmarks/ww_golden.py --run erg")
    return ({"seconds": header["ww_seconds"]},
            [{**r, "name": r["longname"]} for r in rows])


if __name__ == "__main__":
    sys.exit(main())
