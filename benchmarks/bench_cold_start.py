"""A fresh kernel's cached call: ``weight_stats()`` on the embedded model in a new process.

Each run is a fresh ``python`` child (as after a kernel restart) that imports
the toolkit off the clock, then times ``toolkit.weight_stats()`` from call to
Dataset. The first ``xarray.Dataset`` of any process makes xarray import
``dask.array`` when dask is installed (0.9 s here, whoever builds that
Dataset; nothing without dask): the child builds a one-variable Dataset first
and reports that time in its own column. Three cases, side by side:

- uncached: an empty cache folder (the baseline);
- cached: the same folder after one full run (plan and every cell cached);
- cached, results only: the plans deleted, the cell results kept (what the
  first version did: the checkpoint is opened, transformers' model code
  imported, the GGUF probed, before the first lookup).

A fourth row is what a user meets first on the command line: ``python -m
toolkit weights -o /dev/null -q`` on the embedded model with an empty cache
folder, its ``main`` run by ``runpy`` in a child that then counts the modules
loaded (all of them, and those of the optional machinery a GGUF run must not
load: transformers, accelerate, sympy, huggingface_hub, an HTTP client,
matplotlib; dask, which xarray imports itself where installed, is counted
apart). Its "call" column is the CLI's ``main`` (argument parsing, imports,
the pass, the write), "whole process" the child's wall time.

Two floors under that row, each a fresh child timed from outside: ``import torch`` alone (the
interpreter and the library every pass computes with), and the CLI's work itself at its least: ``import
torch``, then each of the model's block matrices read, dequantised by ``gguf.dequantize`` and its
singular values computed in float64 (W Wᵀ by dsyrk, then eigvalsh) on two threads, with nothing else: no
metric, no fit, no Dataset, no file written (the tensor table handed in by the parent). A third child
computes the same singular values without importing torch at all (NumPy, SciPy and gguf only): the
least any float64 route pays on this machine, whatever library it computes with.

Targets (issue 13): cached under 0.5 s and under a quarter of the uncached call,
without importing transformers' model code. Issue 47: the CLI's whole process
under 3 s on a quiet machine. Run: ``make bench-cold``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Results, load, machine, median_of, run_child, table, verdict  # noqa: E402

CHILD = """
import sys, time
sys.path.insert(0, {bench!r})
from _harness import emit
import toolkit
import xarray as xr
t0 = time.perf_counter()
xr.Dataset({{"x": ("a", [1.0])}})
first = time.perf_counter() - t0
t0 = time.perf_counter()
ds = toolkit.weight_stats(progress=False)
call = time.perf_counter() - t0
heavy = sorted(m for m in sys.modules if m.startswith(("transformers.models.", "transformers.modeling_gguf")))
emit(call_s=call, xarray_first_s=first, cells=int(ds.frobenius_norm.notnull().sum()), model_code=len(heavy))
"""

CLI_CHILD = """
import runpy, sys, time
sys.path.insert(0, {bench!r})
from _harness import emit
sys.argv = ["toolkit", "weights", "-o", "/dev/null", "-q"]
t0 = time.perf_counter()
try:
    runpy.run_module("toolkit", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
call = time.perf_counter() - t0
tops = {{m.partition(".")[0] for m in sys.modules}}
optional = sorted(tops & {{"transformers", "accelerate", "sympy", "huggingface_hub", "httpx", "httpx2", "requests",
                          "matplotlib", "seaborn", "PIL", "ipywidgets", "distributed"}})
emit(call_s=call, modules=len(sys.modules), optional=optional,
     dask_modules=sum(1 for m in sys.modules if m == "dask" or m.startswith("dask.")))
"""


FLOOR_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from _harness import emit
t0 = time.perf_counter()
if {torch!r}:
    import torch
imported = time.perf_counter() - t0
if {work!r}:
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np
    from gguf import dequantize
    from scipy.linalg.blas import dsyrk
    from threadpoolctl import threadpool_limits
    path, tensors = json.load(open({table!r}))

    def singular_values(t):
        start, nbytes, shape, gtype = t
        with open(path, "rb") as fh:
            fh.seek(start)
            raw = np.frombuffer(fh.read(nbytes), dtype=np.uint8).reshape(shape[0], -1)
        w = dequantize(raw, gtype).astype(np.float64)
        if w.shape[0] > w.shape[1]:
            w = w.T
        return np.sqrt(np.clip(np.linalg.eigvalsh(dsyrk(1.0, w), UPLO="U"), 0, None))

    with threadpool_limits(1), ThreadPoolExecutor(2) as pool:
        n = sum(1 for _ in pool.map(singular_values, tensors))
else:
    n = 0
emit(import_s=imported, matrices=n)
"""


def floor_child(table: Path | None, torch: bool = True) -> dict:
    """``import torch`` alone (``table`` None), or the singular values of the tensors listed in ``table``
    (after ``import torch``, or without it where ``torch`` is false)."""
    code = FLOOR_CHILD.format(bench=str(Path(__file__).resolve().parent), work=table is not None,
                              table=str(table or ""), torch=torch)
    return run_child([sys.executable, "-c", code])


def write_table(folder: Path) -> Path:
    """The embedded model's quantised block matrices as (start, nbytes, byte shape, type), for the floor child."""
    import json

    from toolkit.bundled import default_model_path
    from toolkit.sources.gguf.table import read_gguf_table

    path = default_model_path()
    rows = []
    for t in read_gguf_table(path).tensors:
        if t.name.startswith("blk.") and len(t.shape) == 2:
            rows.append([t.start, t.nbytes, list(t.shape), t.ggml_type])
    out = folder / "table.json"
    out.write_text(json.dumps([str(path), rows]))
    return out


def cli_child(cache: Path) -> dict:
    code = CLI_CHILD.format(bench=str(Path(__file__).resolve().parent))
    return run_child([sys.executable, "-c", code], env={"TOOLKIT_CACHE_DIR": str(cache)})


def child(cache: Path) -> dict:
    code = CHILD.format(bench=str(Path(__file__).resolve().parent))
    return run_child([sys.executable, "-c", code], env={"TOOLKIT_CACHE_DIR": str(cache)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    rec = Results("cold_start")
    print(machine())
    print(load())
    rows, runs = [], {"uncached": [], "cached": [], "cached, results only": []}
    cli, torch_only, floor, bare_floor = [], [], [], []
    scratch = Path(tempfile.mkdtemp(prefix="toolkit-cold-floor-"))
    table_file = write_table(scratch)
    for _ in range(args.reps):
        folder = Path(tempfile.mkdtemp(prefix="toolkit-cold-cli-"))
        try:
            cli.append(cli_child(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        torch_only.append(floor_child(None))
        floor.append(floor_child(table_file))
        bare_floor.append(floor_child(table_file, torch=False))
        folder = Path(tempfile.mkdtemp(prefix="toolkit-cold-"))
        try:
            runs["uncached"].append(child(folder))
            runs["cached"].append(child(folder))
            shutil.rmtree(folder / "plans", ignore_errors=True)
            runs["cached, results only"].append(child(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    base = median_of(runs["uncached"], "call_s")
    for name, rs in runs.items():
        call = median_of(rs, "call_s")
        rows.append([name, f"{call:.3f} s", f"{call / base:.3f}", str(max(r["model_code"] for r in rs)),
                     f"{median_of(rs, 'xarray_first_s'):.3f} s", f"{median_of(rs, 'process_s'):.2f} s"])
    print(table(rows, ["case", "call -> Dataset (median)", "x uncached", "model-code modules",
                       "xarray's first Dataset", "whole process"]))
    print(table([["python -m toolkit weights, uncached", f"{median_of(cli, 'call_s'):.3f} s",
                  str(max(r["modules"] for r in cli)), ", ".join(sorted({o for r in cli for o in r["optional"]}))
                  or "none", str(max(r["dask_modules"] for r in cli)), f"{median_of(cli, 'process_s'):.2f} s"]],
                ["case", "main (median)", "modules", "optional machinery", "dask modules (xarray's)",
                 "whole process"]))
    shutil.rmtree(scratch, ignore_errors=True)
    cli_s = median_of(cli, "process_s")
    torch_s, floor_s = median_of(torch_only, "process_s"), median_of(floor, "process_s")
    bare_s = median_of(bare_floor, "process_s")
    print(table([["import torch, nothing else", f"{torch_s:.2f} s", f"{median_of(torch_only, 'import_s'):.2f} s"],
                 [f"import torch, then the singular values of the {floor[0]['matrices']} matrices (float64, "
                  "two threads)", f"{floor_s:.2f} s", f"{median_of(floor, 'import_s'):.2f} s"],
                 ["the same singular values without importing torch (NumPy, SciPy, gguf only)", f"{bare_s:.2f} s",
                  "-"]],
                ["floor of the CLI's process", "whole process (median)", "of which import torch"]))
    print(f"CLI whole process {cli_s:.2f} s (< 3 s): {verdict(cli_s < 3)}; {cli_s / floor_s:.2f}x its floor "
          f"({floor_s:.2f} s{', itself over 3 s' if floor_s >= 3 else ''}; without torch {bare_s:.2f} s"
          f"{', over 3 s too' if bare_s >= 3 else ''})")
    cached = median_of(runs["cached"], "call_s")
    ok = cached < 0.5 and cached < base / 4 and max(r["model_code"] for r in runs["cached"]) == 0
    print(f"cached call {cached:.3f} s (< 0.5 s), {cached / base:.3f} of uncached (< 0.25), "
          f"no model code: {verdict(ok)}")
    print(load())
    rec.save({"reps": args.reps, "ok": ok, "cases": {
        name: {"call_s": median_of(rs, "call_s"), "x_uncached": median_of(rs, "call_s") / base,
               "model_code_modules": max(r["model_code"] for r in rs), "process_s": median_of(rs, "process_s")}
        for name, rs in runs.items()},
        "cli": {"call_s": median_of(cli, "call_s"), "process_s": cli_s, "ok": cli_s < 3,
                "modules": max(r["modules"] for r in cli), "dask_modules": max(r["dask_modules"] for r in cli),
                "optional": sorted({o for r in cli for o in r["optional"]}),
                "floor": {"import_torch_process_s": torch_s, "singular_values_process_s": floor_s,
                          "singular_values_without_torch_process_s": bare_s,
                          "matrices": floor[0]["matrices"], "x_floor": cli_s / floor_s}}})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
