"""Golden tables: every column of WeightWatcher 0.7.7's ``analyze()``, per matrix, for the suite.

Runs WeightWatcher (in ``benchmarks/.ww-venv``, created on first use by
``bench_weightwatcher.ensure_ww_venv``) on one bundled model and writes every
column of its ``details`` DataFrame, one row per matrix, to a CSV under
``tests/data/``, plus WeightWatcher's own ``get_summary()`` of the matrices the
toolkit also measures. The file starts with ``#`` lines that record where the
numbers came from: the WeightWatcher, torch, transformers, numpy, scipy and
scikit-learn versions of its venv, the ``analyze()`` keywords, the model file
and its sha256, the date, the machine and the exact command. Values are
written with ``repr`` (17 significant digits), so the suite compares to the
last bit that was computed.

The suite (``tests/end_to_end/test_weightwatcher_golden.py``) reads these files; it never
runs WeightWatcher. Rerun this script after a WeightWatcher or bundled-model
change, then run the suite.

How each model is fed to WeightWatcher (as ``bench_ww_columns.py`` does):

  smollm2, gemma3  ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=float32)``
                   (transformers dequantises the GGUF; the toolkit reads the same file)
  minilm           ``AutoModel.from_pretrained(folder, dtype=float32)`` (BERT, safetensors)

Runs (``--run``):

  default    ``analyze(mp_fit=True, randomize=True)``: every default column, the
             Marchenko-Pastur fit and the randomized ones (``--no-mp`` /
             ``--no-random`` drop them; the file then says so)
  clip_xmax  ``analyze(fix_fingers="clip_xmax")``: the fit columns of that mode
  erg        ``analyze(ERG=True)``: the default fit plus the detX / ERG columns (``detX_num``,
             ``num_ERG_spikes``, ``ERG_gap``, ``detX_val``, ``detX_val_unrescaled``)

Usage::

    .venv/bin/python benchmarks/ww_golden.py --model smollm2|gemma3|minilm [--run default|clip_xmax|erg]
        [--no-mp] [--no-random] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
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
import bench_weightwatcher as BW  # noqa: E402

DATA = H.ROOT / "tests" / "data"
MODELS = {"smollm2": "default_model_path", "gemma3": "gemma3_path", "minilm": "minilm_dir"}
RUNS = ("default", "clip_xmax", "erg")
VERSIONS = ("weightwatcher", "torch", "transformers", "numpy", "scipy", "sklearn", "powerlaw", "pandas")


def golden_path(model: str, run: str) -> Path:
    return DATA / f"ww_{model}_{run}.csv"


def ww_options(run: str, mp: bool, random: bool) -> dict:
    """The ``analyze()`` keywords of a run."""
    if run == "clip_xmax":
        return {"fix_fingers": "clip_xmax"}
    if run == "erg":
        return {"ERG": True}
    return {"mp_fit": mp, "randomize": random}


# ---------------------------------------------------------------- children


def child_names(model_path: str, out: str) -> None:
    """The toolkit's parameter names of the model's cells (project venv; reads the plan, one cheap metric)."""
    import toolkit

    ds = toolkit.weight_stats(model_path, ["frobenius_norm"], progress=False, cache=False)
    names = sorted(str(n).removesuffix(".weight") for n in ds.parameter_name.values.ravel() if n)
    Path(out).write_text(json.dumps(names))


def child_ww(model_path: str, out: str, options: dict, names_file: str) -> None:
    import importlib
    import logging

    import torch
    import weightwatcher as ww

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    path = Path(model_path)
    t0 = time.perf_counter()
    if path.suffix == ".gguf":
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    else:
        from transformers import AutoModel

        model = AutoModel.from_pretrained(str(path), dtype=torch.float32)
    watcher = ww.WeightWatcher(model=model)
    details = watcher.analyze(**options)
    seconds = time.perf_counter() - t0
    names = set(json.loads(Path(names_file).read_text()))
    ours = details[details["longname"].isin(names)]
    summary = {k: float(v) for k, v in watcher.get_summary(ours).items()}
    versions = {}
    for mod in VERSIONS:
        try:
            versions[mod] = str(importlib.import_module(mod).__version__)
        except (ImportError, AttributeError):
            versions[mod] = "unknown"
    rows = [{c: _plain(v) for c, v in r.items()} for r in details.to_dict("records")]
    Path(out).write_text(json.dumps({"rows": rows, "columns": list(details.columns), "summary": summary,
                                     "versions": versions, "seconds": seconds, "matched": len(ours)}))


def _plain(v):
    """A JSON value of a DataFrame cell: numbers as float (NaN kept), the rest as str."""
    if isinstance(v, bool):
        return float(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f if not isinstance(v, str) else str(v)


# ---------------------------------------------------------------- driver


def model_path(model: str) -> str:
    code = f"from toolkit.bundled import {MODELS[model]} as p; print(p())"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return found.stdout.strip()


def sha256(path: Path) -> str:
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.suffix == ".safetensors")
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=list(MODELS), default="smollm2")
    ap.add_argument("--run", choices=RUNS, default="default")
    ap.add_argument("--no-mp", action="store_true", help="default run without the Marchenko-Pastur fit")
    ap.add_argument("--no-random", action="store_true", help="default run without the randomized columns")
    ap.add_argument("--out", type=Path, default=None, help="default: tests/data/ww_<model>_<run>.csv")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--options", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--names", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--to", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child == "names":
        child_names(args.path, args.to)
        return 0
    if args.child == "ww":
        child_ww(args.path, args.to, json.loads(args.options), args.names)
        return 0

    command = "benchmarks/ww_golden.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = args.out or golden_path(args.model, args.run)
    options = ww_options(args.run, not args.no_mp, not args.no_random)
    path = Path(model_path(args.model))
    BW.ensure_ww_venv()
    me = str(Path(__file__).resolve())
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
    start_load = H.load()
    print(f"{start_load} at start; {args.model}: {path}; analyze({options})", flush=True)
    with tempfile.TemporaryDirectory(prefix="ww-golden-") as tmp:
        run_env = {**os.environ, **env}
        subprocess.run([sys.executable, me, "--child", "names", "--path", str(path), "--to", f"{tmp}/names.json"],
                       check=True, env=run_env)
        subprocess.run([str(BW.WW_PY), me, "--child", "ww", "--path", str(path), "--to", f"{tmp}/ww.json",
                        "--options", json.dumps(options), "--names", f"{tmp}/names.json"],
                       check=True, cwd=tmp, env=run_env)
        res = json.loads(Path(f"{tmp}/ww.json").read_text())
    header = {
        "what": f"WeightWatcher {res['versions']['weightwatcher']} analyze() details, one row per matrix",
        "model": args.model, "model_file": path.name, "model_sha256": sha256(path),
        "fed_as": ("AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=torch.float32)"
                   if path.suffix == ".gguf" else "AutoModel.from_pretrained(folder, dtype=torch.float32)"),
        "analyze_options": options, "versions": res["versions"],
        "get_summary_of_toolkit_matrices": res["summary"], "toolkit_matrices_matched": res["matched"],
        "command": f".venv/bin/python {command}", "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": H.machine(), "load": f"{start_load} at start, {H.load()} at end",
        "ww_seconds": round(res["seconds"], 1),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as fh:
        for k, v in header.items():
            fh.write(f"# {k}: {json.dumps(v)}\n")
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(res["columns"])
        for r in res["rows"]:
            w.writerow(["" if isinstance(v, float) and math.isnan(v) else repr(v) if isinstance(v, float) else v
                        for v in (r[c] for c in res["columns"])])
    print(f"wrote {out}: {len(res['rows'])} matrices, {len(res['columns'])} columns, WeightWatcher "
          f"{res['seconds']:.0f} s; {H.load()} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
