"""Notebook 05's full grid: the embedded SmolLM2 pruned (magnitude and Wanda) uniformly and by AlphaPruning's
allocation (metrics ``alpha`` and ``alpha_peak``, ε 0.1-0.3) at 50-80 % global sparsity, perplexity on
``data/heldout.txt`` with a paired bootstrap over its windows.

Executes ``notebooks/05_alpha_pruning.ipynb`` headless (nbclient, its default settings, not the tests' QUICK
one) with ``TOOLKIT_OUT`` pointing at a temporary folder, and saves the notebook's result (the perplexity
table, its settings and the reading written from its numbers) with the run's provenance:

    .venv/bin/python benchmarks/bench_alpha_pruning.py

Writes ``benchmarks/results/alpha_pruning.json`` (``--no-save``: print only); ``benchmarks/publish.py`` renders
the README's section from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, Results, load, thread_env  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "05_alpha_pruning.ipynb"


def run_notebook(out: Path, threads: int, timeout: int) -> dict:
    """Execute the notebook (kernel in notebooks/, the checkout importable) and return its saved result."""
    import nbformat
    from nbclient import NotebookClient

    env = {"TOOLKIT_OUT": str(out), **thread_env(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}
    env_before = {k: os.environ.get(k) for k in (*env, "TOOLKIT_QUICK")}
    os.environ.update(env)
    os.environ.pop("TOOLKIT_QUICK", None)  # the full run
    try:
        nb = nbformat.read(NOTEBOOK, as_version=4)
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return json.loads((out / "alpha_pruning.json").read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads in the kernel (1: shared cores)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds a notebook cell may take")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    results = Results("alpha_pruning")
    with tempfile.TemporaryDirectory() as tmp:
        record = run_notebook(Path(tmp), args.threads, args.timeout)
    if record.get("quick"):
        raise SystemExit("the notebook ran its QUICK setting; unset TOOLKIT_QUICK")
    print(f"{load()}; dense perplexity {record['dense_perplexity']:.2f} on {record['tokens']} tokens")
    for row in record["rows"]:
        figures = (f"{row['perplexity']:.2f}" + (f" ({row['ratio']:.2f}x uniform [{row['lo']:.2f}, {row['hi']:.2f}])"
                                                 if "ratio" in row else "")) if "perplexity" in row else "refused"
        print(f"  {row['pruner']} {row['sparsity']:.0%} {row['allocation']} {row['metric']} {row['epsilon']:g}: "
              f"{figures}")
    print(record["reading"])
    if not args.no_save:
        results.save({**record, "threads": args.threads})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
