"""Reproduce the headless stall of notebook 03's old prompt cell, and its absence with the fix.

N cells each end by putting a large figure into an ``ipywidgets.Output``:

- ``capture``: ``with out: ... plt.show()`` (the old prompt cell). nbclient, which plays the widget's
  front end, sends every captured output back to the kernel on the shell socket while it awaits the
  cell's ``execute_reply`` on that socket; jupyter_client sends through a blocking shadow of the asyncio
  socket, which can swallow the wake-up of the reply, and the cell then waits out its timeout (the last
  poll at the timeout finds the reply, so the run still succeeds, late).
- ``set``: ``out.outputs = (...)`` (``toolkit.widgets.prompt``, the explorers): nothing goes back.

A cell counts as stalled when it takes at least ``timeout - 1`` seconds (each takes about 1 s).
Run: ``.venv/bin/python benchmarks/repro_output_widget_stall.py [capture|set] [--cells 30] [--timeout 8]``.
Measured on 2 busy cores (load ~10): capture 28 of 30 cells stalled, set 0 of 30.
"""

from __future__ import annotations

import argparse
import time

import nbformat
from nbclient import NotebookClient

SETUP = """%matplotlib inline
import base64, io
import ipywidgets as W
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
out = W.Output()
display(out)
def figure():
    fig, ax = plt.subplots(figsize=(11, 6))
    ax.imshow(np.random.rand(300, 550))  # a large PNG, as two heatmaps give
    return fig
"""
CELL = {
    "capture": "with out:\n    out.clear_output(wait=True)\n    figure()\n    plt.show()",
    "set": "fig = figure(); buf = io.BytesIO(); fig.savefig(buf, format='png'); plt.close(fig)\n"
           "out.outputs = ({'output_type': 'display_data', 'metadata': {},\n"
           "                'data': {'image/png': base64.b64encode(buf.getvalue()).decode('ascii')}},)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(CELL))
    parser.add_argument("--cells", type=int, default=30)
    parser.add_argument("--timeout", type=int, default=8, help="cell timeout, seconds")
    args = parser.parse_args()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c)
                                         for c in [SETUP] + [CELL[args.variant]] * args.cells])
    times: dict = {}
    client = NotebookClient(
        nb, timeout=args.timeout, kernel_name="python3",
        on_cell_execute=lambda cell, cell_index: times.__setitem__(cell_index, [time.monotonic()]),
        on_cell_executed=lambda cell, cell_index, **_: times[cell_index].append(time.monotonic()))
    client.execute()
    took = sorted(end - start for index, (start, end) in times.items() if index > 0)
    stalled = sum(t >= args.timeout - 1 for t in took)
    print(f"{args.variant}: {stalled} of {len(took)} cells stalled until the {args.timeout} s timeout "
          f"(median cell {took[len(took) // 2]:.2f} s, max {took[-1]:.2f} s)")


if __name__ == "__main__":
    main()
