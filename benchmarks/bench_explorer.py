"""The explorer in a real browser: update and hover times, and the first cells of a live pass.

1. ``tests/end_to_end/test_browser_explorer.py`` in JupyterLab and Voilà (headless Chromium): each change of
   metric of a 30-layer x 7 heatmap and of the lab's 12-panel grid, timed in the page from the
   change to the repaint, and the hover tooltip of 20 cells, with the load average around them.
2. ``explore_model`` on a 28-layer Qwen2.5-7B-shaped checkpoint (``_sparse_7b``: the plan and
   layer 0 real, the rest sparse), result cache empty, served by Voilà: the seconds from the call
   in the kernel to the first measured cell drawn in the page.

The figures are printed and written to ``benchmarks/results/explorer.json``; nothing is asserted
(``benchmarks/publish.py`` puts them into the README).

Usage: ``.venv/bin/python benchmarks/bench_explorer.py [--skip-suite] [--reps 3] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as H
import _sparse_7b

sys.path.insert(0, str(H.ROOT / "tests"))


def browser_timings(tmp: Path) -> dict:
    path = tmp / "timings.json"
    env = dict(os.environ, TOOLKIT_EXPLORER_TIMINGS=str(path), PYTHONPATH=os.pathsep.join(
        filter(None, [os.environ.get("PYTHONPATH"), str(H.ROOT)])))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                    str(H.ROOT / "tests" / "test_browser_explorer.py")], cwd=H.ROOT, env=env, check=True)
    return json.loads(path.read_text())


FIRST_CELLS = """import time
T_IMPORT = time.time()
from toolkit.widgets import explore_model
T_CALL = time.time()
live = explore_model({path!r}, refresh=0.5)
print(f"T_IMPORT={{T_IMPORT:.3f}} T_CALL={{T_CALL:.3f}}")
live"""


def first_cells(tmp: Path, folder: Path) -> dict:
    """Seconds from ``explore_model(...)`` in the kernel to the first measured cell drawn in the page (and,
    apart, the fresh kernel's ``from toolkit.widgets import explore_model`` before it)."""
    from _browser import PAGE_TIMEOUT_MS, chromium, voila, write_notebook

    os.environ["TOOLKIT_CACHE_DIR"] = str(tmp / "cache")  # nothing cached: the plan and the cells cold
    notebook = write_notebook(tmp / "live.ipynb", [FIRST_CELLS.format(path=str(folder))])
    start = os.getloadavg()
    with voila(notebook, tmp) as url, chromium(tmp, width=1500, height=1100) as page:
        page.goto(url, timeout=PAGE_TIMEOUT_MS, wait_until="commit")
        page.wait_for_function("() => document.querySelector('.toolkit-heatmap rect.cell:not(.nan)')",
                               timeout=PAGE_TIMEOUT_MS, polling=20)
        seen = page.evaluate("() => Date.now() / 1000")
        text = page.inner_text("body")
        called = float(re.search(r"T_CALL=([\d.]+)", text).group(1))
        imported = float(re.search(r"T_IMPORT=([\d.]+)", text).group(1))
        shown = page.locator(".toolkit-heatmap rect.cell:not(.nan)").count()
        page.screenshot(path=str(H.ROOT / "test-artifacts" / "explorer_first_cells_7b.png"))
        page.get_by_role("button", name="Stop").click()
    return {"seconds": seen - called, "import_s": called - imported, "cells_shown": shown, "layers": 28,
            "cache": "empty",
            "load_average": {"start": [round(x, 2) for x in start], "end": [round(x, 2) for x in os.getloadavg()]}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-suite", action="store_true", help="only the first cells of the 7B shape")
    ap.add_argument("--reps", type=int, default=3, help="runs of the first-cells measurement (the median is kept)")
    ap.add_argument("--keep", type=Path, help="folder for the 7B-shaped checkpoint (kept between runs)")
    args = ap.parse_args(argv)
    results = H.Results("explorer")
    with tempfile.TemporaryDirectory(prefix="bench-explorer-") as tmp:
        tmp = Path(tmp)
        figures = {} if args.skip_suite else browser_timings(tmp)
        folder = _sparse_7b.write(args.keep or tmp / "qwen2.5-7b-shape")
        time.sleep(1)
        runs = []
        for rep in range(args.reps):  # each with its own empty cache
            (tmp / f"live-{rep}").mkdir()
            runs.append(first_cells(tmp / f"live-{rep}", folder))
            print(f"  first cells, run {rep + 1}: {runs[-1]['seconds']:.1f} s after the call", flush=True)
        figures["first_cells"] = {**min(runs, key=lambda r: abs(r["seconds"] - statistics.median(
            x["seconds"] for x in runs))), "runs_s": [r["seconds"] for r in runs], "reps": args.reps}
    rows = []
    for front_end in ("jupyterlab", "voila"):
        f = figures.get(front_end)
        if f:
            rows.append([front_end] + [f"{statistics.median(f[k]):.0f} ms (max {max(f[k]):.0f})" for k in
                                       ("heatmap_30x7_update_ms", "lab_12_panels_update_ms", "hover_ms")])
    if rows:
        print(H.table(rows, ["front end", "30 x 7 heatmap update", "lab, 12 panels", "hover"]))
    print(f"first cells of a 28-layer 7B shape on screen: {figures['first_cells']['seconds']:.1f} s after the call "
          f"(the median of {args.reps})")
    results.save(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
