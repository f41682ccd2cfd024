"""The developers' loop: ``make test-fast`` and ``make test`` timed on a fresh clone of HEAD.

Each repetition clones the repository's committed HEAD into a temporary folder (``git clone``: no
``__pycache__``, no ``.pytest_cache``, no test artifacts), then runs the two Makefile targets there as CI
does, with this checkout's virtual environment (``VENV=``, ``make -o setup``: the set-up is not what is
timed) and the clone first on ``PYTHONPATH`` (so that every test process, subprocesses included, imports
the clone's code). The wall time of each target is measured from outside ``make``; ``make test``'s two
pytest runs (everything but the browser tests on two pytest-xdist workers, then the browser tests alone)
are read from pytest's own summary lines. Targets (issue 47): ``make test-fast`` under 3 minutes and the
full suite under 12 minutes on this machine, quiet, median of the repetitions.

Usage: ``.venv/bin/python benchmarks/bench_suite.py [--reps 3] [--only fast|full]`` (commit first: the
clone is of HEAD).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, Results, load, machine, table, verdict  # noqa: E402

#: Goals of issue 47, seconds.
TARGETS = {"test-fast": 180.0, "test": 720.0}
SUMMARY = re.compile(r"=* ?(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s")


def clone(into: Path) -> str:
    """A fresh clone of HEAD at ``into``; its commit."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(into)], check=True)
    return subprocess.run(["git", "-C", str(into), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def run_target(folder: Path, target: str, venv: Path) -> dict:
    """``make -o setup VENV=venv target`` in ``folder``: wall seconds, pytest's summaries, exit status."""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    t0 = time.perf_counter()
    done = subprocess.run(["make", "-o", "setup", f"VENV={venv}", target], cwd=folder, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    runs = [{"counts": m["counts"], "seconds": float(m["seconds"])} for m in SUMMARY.finditer(done.stdout)]
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
    return {"seconds": seconds, "pytest": runs, "status": done.returncode}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=("fast", "full"), default=None)
    args = ap.parse_args(argv)
    venv = ROOT / ".venv"
    targets = {"fast": ["test-fast"], "full": ["test"], None: ["test-fast", "test"]}[args.only]
    rec = Results("suite")
    print(machine())
    print(load())
    runs: dict[str, list[dict]] = {t: [] for t in targets}
    commit = ""
    for _ in range(args.reps):
        for target in targets:
            folder = Path(tempfile.mkdtemp(prefix="toolkit-suite-"))
            try:
                commit = clone(folder / "repo")
                runs[target].append({**run_target(folder / "repo", target, venv), "load": load()})
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            last = runs[target][-1]
            print(f"{target}: {last['seconds']:.0f} s, status {last['status']}, "
                  + "; ".join(f"{r['counts']} in {r['seconds']:.0f} s" for r in last["pytest"]), flush=True)
    rows, figures = [], {"commit": commit, "reps": args.reps, "targets_s": {t: TARGETS[t] for t in targets},
                         "targets": {}}
    ok = True
    for target, rs in runs.items():
        median = statistics.median(r["seconds"] for r in rs)
        passed = all(r["status"] == 0 for r in rs)
        ok = ok and passed and median < TARGETS[target]
        figures["targets"][target] = {"median_s": median, "seconds": [r["seconds"] for r in rs], "green": passed,
                                      "runs": rs}
        rows.append([f"make {target}", f"{median / 60:.1f} min", f"{min(r['seconds'] for r in rs) / 60:.1f}-"
                     f"{max(r['seconds'] for r in rs) / 60:.1f} min", rs[-1]["pytest"][0]["counts"] if rs[-1]["pytest"]
                     else "?", f"< {TARGETS[target] / 60:.0f} min: {verdict(passed and median < TARGETS[target])}"])
    print(table(rows, ["target", "median", "range", "tests (last run, first pytest)", "goal"]))
    print(load())
    rec.save(figures)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
