"""Notebook 01 in Voilà while its model is measured (issue 36, item 4): the page used to show a spinner for
41 s and then everything at once, because a cell after ``explore_model`` waited for ``.ds`` (Voilà renders
a page once its cells have run). Now the live panel is on the page while the pass runs, the cells that
need the finished Dataset show a placeholder (``live.when_done``), and their figures replace it when the
pass ends.

Needs ``/usr/bin/chromium``, ``voila`` and ``playwright``; leaves a screenshot in ``test-artifacts/``.
"""

import re

import _browser as B

pytestmark = B.MARKS
NOTEBOOK = B.ROOT / "notebooks" / "01_weight_heatmaps.ipynb"
PLACEHOLDER = "shown when the measuring"


def test_notebook_01_shows_the_live_panel_while_the_model_is_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached: the pass takes its time
    with B.voila(NOTEBOOK, tmp_path) as url, B.chromium(tmp_path) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        # the live panel's progress line (on a loaded machine the page may come only as the pass ends)
        measuring = page.get_by_text(re.compile(r"^Measur(ing|ed) ")).first
        measuring.wait_for(state="visible", timeout=B.PAGE_TIMEOUT_MS)
        measuring.scroll_into_view_if_needed()
        page.screenshot(path=str(B.ARTIFACTS / "notebook01_live_while_measuring.png"))
        done = page.get_by_text(re.compile(r"^Measured ")).first
        done.wait_for(timeout=B.PAGE_TIMEOUT_MS)  # the pass finished
        page.wait_for_function(f"() => !document.body.innerText.includes({PLACEHOLDER!r})",
                               timeout=B.PAGE_TIMEOUT_MS)  # every placeholder replaced by its result
        done.scroll_into_view_if_needed()
        page.screenshot(path=str(B.ARTIFACTS / "notebook01_live_finished.png"))
        text = page.inner_text("body")
        assert "statistics:" in text and "cells flagged" in text
        # the later cells did not wait for the pass: their results are in the placeholders (Output widgets)
        # they put on the page, filled when it ended, and not in the cells' own outputs
        deferred = page.locator(".widget-output").filter(has_text="cells flagged")
        assert deferred.count() == 1 and "statistics:" in " ".join(page.locator(".widget-output").all_inner_texts())
        for bad in ("Traceback", "Error"):
            assert bad not in text, f"page shows {bad!r}: ...{text[max(0, text.find(bad) - 300):][:800]}"
        assert page.locator(".jp-OutputArea-output img, .widget-output img").count() >= 3  # the figures


SLOW_AFTER = 4  # the pass's thread is held this long after its 4th tensor's cells, as by a large tensor next
HOLD_S = 8


def test_the_first_look_picture_keeps_up_with_its_progress_line(tmp_path, monkeypatch):
    """Issue 45: a first look's progress line said 6 tensors while its picture showed 1 cell for about 11 s:
    cells that came within the refresh limit of the last redraw waited for the next tensor, a large one. Here
    a tiny model gets a first look and its pass's thread is held for 8 s after the 4th tensor's cells (a large
    matrix measured next); the picture must show those 4 cells within 1 s of the line saying 4 tensors."""
    from toolkit.testing import write_tiny_checkpoint

    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    ckpt = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=3, seed=5)
    go = tmp_path / "go"  # created once the page's clock runs: a page that loads slowly (Voila executes the
    # notebook before it sends the page) would else find the pass done and no line ever saying 4 tensors
    notebook = B.write_notebook(tmp_path / "first_look.ipynb", [
        "import os, time\n"
        "from toolkit.widgets import explore_model, live_pass, live_plan\n"
        "live_plan.FIRST_LOOK_ENTRIES = 0  # the tiny model gets a first look (attn.k and attn.v first)\n"
        "measured_cells = live_pass.LivePass._cells\n"
        "def held(self, partial):\n"
        f"    deadline = time.monotonic() + {B.PAGE_TIMEOUT_MS / 1000}\n"
        f"    while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)  # the first cells wait until the page's clock runs\n"
        "    measured_cells(self, partial)\n"
        f"    if self._units == {SLOW_AFTER}:\n"
        f"        time.sleep({HOLD_S})  # a large tensor measured next\n"
        "live_pass.LivePass._cells = held",
        f"live = explore_model({str(ckpt)!r}, metrics=['frobenius_norm'], out_dir={str(tmp_path)!r})",
    ])
    # timed in the page (a poll every 20 ms there), not by round trips from here, which a loaded machine slows
    watch = """n => { window.__said = window.__drawn = null; setInterval(() => {
        const t = performance.now();
        const said = [...document.body.innerText.matchAll(/(\\d+) \\/ (\\d+) tensors/g)].map(m => +m[1]);
        if (window.__said === null && said.some(k => k >= n)) window.__said = t;
        const drawn = document.querySelectorAll('.toolkit-heatmap rect.cell:not(.nan)').length;
        if (window.__said !== null && window.__drawn === null && drawn >= n) window.__drawn = t;
      }, 20); }"""
    with B.voila(notebook, tmp_path) as url, B.chromium(tmp_path) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        page.wait_for_load_state("domcontentloaded", timeout=B.PAGE_TIMEOUT_MS)
        page.evaluate(watch, SLOW_AFTER)
        go.touch()
        page.wait_for_function("() => window.__drawn !== null", timeout=B.PAGE_TIMEOUT_MS)
        said, drawn = page.evaluate("() => [window.__said, window.__drawn]")
        page.screenshot(path=str(B.ARTIFACTS / "first_look_keeps_up.png"))
        lag = (drawn - said) / 1000
        assert lag <= 1.0, f"the picture showed {SLOW_AFTER} cells {lag:.1f} s after the line said {SLOW_AFTER} tensors"
