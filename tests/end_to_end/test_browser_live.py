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
