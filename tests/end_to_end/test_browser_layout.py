"""The explorer's layout at common widths in Voilà and headless Chromium (issue 36, items 1 and 3): a step
series side by side in one row on one scale, no panel wrapped or cut, colour-bar labels clear of their
ticks, the top-cells table on screen, and the ticks of a near-constant metric told apart."""

import pytest

from _browser import MARKS, ROOT, chromium, voila, write_notebook

pytestmark = MARKS

CELLS = ["""
import numpy as np
from _stats_data import make_stats
from toolkit.widgets import explore
ds = make_stats(28, checkpoints=3)
ds["stable_rank"] = ds["stable_rank"] * ds["step"].clip(min=500) / 2000
ds["stable_rank"].attrs["long_name"] = "stable rank of the weights, relative to the first step"  # a long label
rng = np.random.default_rng(0)
ds["rms"] = (("checkpoint", "layer", "component"), 0.02 * (1 + rng.uniform(-5e-4, 5e-4, (3, 28, 7))),
             {"long_name": "RMS of the entries", "units": "1"})
shared = explore(ds, "stable_rank")
shared.controls["view"].value = "side"
shared
""", """
separate = explore(ds, "stable_rank")
separate.controls["view"].value = "side"
separate.controls["range"].value = "separate"
separate
""", """
explore(ds, "rms")
"""]

GEOMETRY = """() => [...document.querySelectorAll('.toolkit-explorer-main')].map(m => {
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const cbars = [...m.querySelectorAll('g.toolkit-cbar')].map(g => ({
    ticks: [...g.querySelectorAll('.toolkit-cbar-tick')].map(box),
    labels: [...g.querySelectorAll('.toolkit-cbar-label')].map(box),
    bar: box(g.querySelector('rect')),
    text: [...g.querySelectorAll('.toolkit-cbar-tick')].map(t => t.textContent)}));
  return {main: box(m), side: box(m.querySelector('.toolkit-explorer-side')),
          panels: [...m.querySelectorAll('svg.toolkit-heatmap-panel')].map(box),
          top: box(m.querySelector('.toolkit-top-cells')), cbars,
          xlabel: [...m.querySelectorAll('.toolkit-xlabel')].map(t => t.textContent).join(' ')};
})"""


def _check(geo, width):
    shared, separate, rms = geo
    for g in (shared, separate):
        tops = {round(p[1]) for p in g["panels"]}
        assert len(g["panels"]) == 3 and len(tops) == 1, f"{width} px: a panel wrapped under the others"
        assert max(p[2] for p in g["panels"]) <= g["main"][2] + 1, f"{width} px: a panel is cut"
        assert g["top"][2] <= width and g["top"][0] >= 0, f"{width} px: the top-cells table is cut"
        for bar in g["cbars"]:
            right = max(t[2] for t in bar["ticks"])
            assert all(lab[0] >= right - 1 for lab in bar["labels"]), f"{width} px: colour-bar label on its ticks"
            # each rotated line of the label lies along its bar, none past its ends (was cut to "relative w")
            top, bottom = bar["bar"][1], bar["bar"][3]
            assert all(lab[1] >= top - 2 and lab[3] <= bottom + 2 for lab in bar["labels"]), \
                f"{width} px: a colour-bar label longer than its bar"
    assert len(shared["cbars"]) == 1  # one scale for the steps by default: one colour bar
    assert shared["side"][0] > max(p[2] for p in shared["panels"])  # the side panel beside the heatmap
    text = rms["cbars"][0]["text"]
    assert len(set(text)) == len(text) >= 3, text  # were "0.02 0.02 0.02"
    assert "all within" in rms["xlabel"]


def test_layout_at_common_widths(tmp_path):
    notebook = write_notebook(tmp_path / "layout.ipynb", CELLS)
    with voila(notebook, tmp_path, extra_path=str(ROOT / "tests")) as url, \
            chromium(tmp_path, width=1050, height=1000) as page:
        page.goto(url, timeout=240_000, wait_until="commit")
        page.locator(".toolkit-explorer-main svg.toolkit-heatmap-panel").nth(6).wait_for(state="attached",
                                                                                       timeout=240_000)
        for width in (1050, 1400):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(1000)
            _check(page.evaluate(GEOMETRY), width)
        page.set_viewport_size({"width": 1050, "height": 1000})
        page.wait_for_timeout(800)
        geo = page.evaluate(GEOMETRY)
        assert geo[1]["side"][1] > max(p[3] for p in geo[1]["panels"]) - 1  # three colour bars: side below


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
