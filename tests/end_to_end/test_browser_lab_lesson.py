"""Notebook 04's classroom widgets on a Voilà page, in headless Chromium (issue 36, item 7).

The lab explorer opened on "largest attention norm per head", *max over heads*: every panel's y label
lies inside its plot's height (it ran past the panel's top and bottom on one line). The train-your-own
panel: a click on Run trains in the kernel's background (the progress bar moves while the page stays
live), then its chart draws one panel per layer, clipped to its own plots. Needs ``/usr/bin/chromium``, ``voila`` and
``playwright``; leaves a screenshot in ``test-artifacts/``.
"""

import _browser as B

pytestmark = B.MARKS

CELLS = ["from toolkit.lab import load_result\nfrom toolkit.widgets import lab_explorer, train_your_own",
         'ex = lab_explorer(load_result(), "attention_norm_max")\nex.controls["head"].value = "max"\nex',
         'train_your_own("x³/16", epochs=2, depth=3, train_subset=64, eval_batch=16)']

_YLABELS = """() => [...document.querySelectorAll('.toolkit-lab-chart svg.toolkit-chart-panel')].flatMap((svg) => {
  const label = svg.querySelector('text.toolkit-chart-ylabel');
  if (!label) return [];
  const plot = [...svg.querySelectorAll(':scope > rect')].pop().getBoundingClientRect();
  const box = label.getBoundingClientRect();
  return [{top: box.top, bottom: box.bottom, plotTop: plot.top, plotBottom: plot.bottom, left: box.left,
           svgLeft: svg.getBoundingClientRect().left, text: label.textContent}];
})"""


def test_lab_lesson_widgets_in_voila(tmp_path):
    from playwright.sync_api import expect

    notebook = B.write_notebook(tmp_path / "lesson.ipynb", CELLS)
    with B.voila(notebook, tmp_path) as url, B.chromium(tmp_path, width=1300, height=1100) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        page.locator(".toolkit-lab-chart svg.toolkit-chart-panel").nth(11).wait_for(
            state="attached", timeout=B.PAGE_TIMEOUT_MS)
        assert "max over heads" in page.locator(".toolkit-lab-chart .toolkit-chart-title").inner_text()
        labels = page.evaluate(_YLABELS)
        assert len(labels) == 3  # the first panel of each row
        for b in labels:
            assert b["text"].replace(" ", "") == "largestattentionnormperhead"
            assert b["plotTop"] - 0.5 <= b["top"] and b["bottom"] <= b["plotBottom"] + 0.5, b
            assert b["left"] >= b["svgLeft"] - 0.5, b
        panel = page.locator(".toolkit-lab-train")
        panel.get_by_role("button", name="Run").click()
        bar = panel.locator(".progress-bar")
        page.wait_for_function("el => parseFloat(el.style.width) > 0", arg=bar.element_handle(), timeout=120_000)
        panel.locator(".toolkit-lab-train-chart svg.toolkit-chart-panel").nth(2).wait_for(
            state="attached", timeout=240_000)
        ids = page.evaluate("() => [...document.querySelectorAll('clipPath')].map(c => c.id)")
        assert len(ids) == len(set(ids)) > 12  # each chart clips to its own plots (one id used twice clipped
        # the train chart's lines to the explorer's plot area)
        # the summary and the re-enabled Run button are the run's last widget updates, after its chart: waited
        # for (on two busy cores they reached the page a moment after the chart's third panel)
        expect(panel).to_contain_text("test accuracy after 2 epochs", timeout=60_000)
        assert "means nothing yet" in panel.inner_text()
        expect(panel.get_by_role("button", name="Run")).to_be_enabled(timeout=60_000)
        page.wait_for_timeout(4000)  # the kernel's thread then puts the static PNG in the output: the live
        panel = page.locator(".toolkit-lab-train")  # panel must stay (one, with its chart), not turn into a picture
        assert panel.count() == 1 and panel.locator("svg.toolkit-chart-panel").count() == 3
        panel.scroll_into_view_if_needed()
        page.screenshot(path=str(B.ARTIFACTS / "voila_lab_lesson.png"), full_page=True)
        assert "Traceback" not in page.inner_text("body")
