"""The explorer in a real browser: Voila serves a notebook, headless Chromium uses it.

Notebook 01 as a user opens it (the metric changes the figure), and a small
notebook of synthetic statistics for the interaction: hover a cell and read its
tooltip, click it and see its spectrum, change the metric and see exactly one
new figure, switch two models to the difference view, and no label cut off.

Needs ``/usr/bin/chromium``, ``voila`` and ``playwright`` (``.ci/browser-deps.sh``
installs them; never ``playwright install``). Leaves screenshots in
``test-artifacts/``.
"""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_weight_heatmaps.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGE_TIMEOUT_MS = 240_000  # Voila computes the embedded model's statistics before the page is ready
PLOT_IMG = ".toolkit-heatmap-img"  # the explorer's figure (toolkit.widgets.heatmap_view)

_missing = [what for what, ok in [("/usr/bin/chromium", CHROMIUM.exists()),
                                  ("voila", importlib.util.find_spec("voila") is not None),
                                  ("playwright", importlib.util.find_spec("playwright") is not None)] if not ok]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing), reason=f"browser test needs {', '.join(_missing)}: run .ci/browser-deps.sh"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _serve(args: list, cwd: Path, tmp_path: Path, port: int, path: str = "", extra_path: str = ""):
    """Run a Jupyter server (``args`` after ``python -m``) until it answers; yields its URL and
    stops it with the kernels it started."""
    env = dict(os.environ, TOOLKIT_OUT=str(tmp_path / "out"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT), extra_path])))
    log_path = tmp_path / f"{args[0]}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:  # any HTTP answer means the server is up; the page itself may be slow (it runs the notebook)
                urllib.request.urlopen(url + "__toolkit_probe__", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{args[0]} did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url + path
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except ProcessLookupError:  # already gone
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _voila(notebook: Path, tmp_path: Path, extra_path: str = ""):
    """Serve ``notebook`` with Voila on a free port."""
    port = _free_port()
    return _serve(["voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
                   "--show_tracebacks=True"], notebook.parent, tmp_path, port, extra_path=extra_path)


@pytest.fixture
def voila_url(tmp_path):
    with _voila(NOTEBOOK, tmp_path) as url:
        yield url


@contextmanager
def _chromium(tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1100})
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_metric_change_redraws_the_heatmap(voila_url, tmp_path):
    with _chromium(tmp_path) as page:
        page.goto(voila_url, timeout=PAGE_TIMEOUT_MS, wait_until="commit")
        metric = page.locator("select").first
        metric.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
        img = page.locator(PLOT_IMG).first
        img.wait_for(state="visible", timeout=60_000)
        # notebook 01 shows two explorers: the model's, and the mixture-of-experts one of section 8
        page.wait_for_function("sel => document.querySelectorAll(sel).length === 2", arg=PLOT_IMG,
                               timeout=PAGE_TIMEOUT_MS)
        before = img.get_attribute("src")
        assert before and before.startswith("data:image/png")
        options = metric.locator("option").all_inner_texts()
        current = metric.evaluate("el => el.options[el.selectedIndex].text")
        target = next(o for o in options if o != current)
        metric.select_option(label=target)
        page.wait_for_function(
            "([sel, old]) => { const i = document.querySelector(sel); return i && i.src !== old; }",
            arg=[PLOT_IMG, before], timeout=60_000)
        after = page.locator(PLOT_IMG).first.get_attribute("src")
        assert after != before and after.startswith("data:image/png")
        assert page.locator(PLOT_IMG).count() == 2  # still one figure per explorer, none added
        page.locator(PLOT_IMG).first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "notebook01_metric_changed.png"), full_page=True)
        text = page.inner_text("body")
        for bad in ("Traceback", "Error"):
            assert bad not in text, f"page shows {bad!r}: ...{text[max(0, text.find(bad) - 300):][:800]}"
        assert target in text


#: The synthetic notebook: one explorer over a model with stored spectra, one over two models.
SETUP = """
import numpy as np
from _stats_data import make_stats
from toolkit.widgets import explore


def with_spectra(ds, seed=5):
    rng = np.random.default_rng(seed)
    lam = np.sort(rng.pareto(2.5, (ds.sizes["layer"], ds.sizes["component"], 48)) + 0.1, axis=-1)[..., ::-1]
    return ds.assign(eigenvalues=(("layer", "component", "index"), lam))


one = with_spectra(make_stats(12, gate=False))
pair = [make_stats(12, seed=1, source="org/base"), make_stats(12, seed=2, source="org/tuned")]
"""
CELLS = [SETUP, "explore(one)", "explore(pair)"]
HOVER_CELL = (3, "mlp.down")


def _write_notebook(path: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _expected():
    """The same two explorers in this process: the hover texts and boxes the page must show."""
    import matplotlib

    matplotlib.use("Agg")
    sys.path.insert(0, str(ROOT / "tests"))
    scope = {}
    exec(SETUP, scope)  # noqa: S102 - our own constant
    return scope["explore"](scope["one"]), scope["explore"](scope["pair"])


def _cell_point(page, heatmap, panel: dict, row: int, col: int):
    """Page coordinates of the centre of cell (row, col) of a panel of ``heatmap`` (a locator)."""
    img = heatmap.locator("img").first
    img.scroll_into_view_if_needed()
    bb = img.bounding_box()
    left, top, right, bottom = panel["box"]
    x = bb["x"] + bb["width"] * (left + (col + 0.5) / panel["n_cols"] * (right - left))
    y = bb["y"] + bb["height"] * (bottom - (row + 0.5) / panel["n_rows"] * (bottom - top))
    return x, y


def _wait_rendered(page, index: int, after: int = 0):
    """Wait until heatmap ``index`` has drawn a figure newer than ``after``; returns its render count."""
    page.wait_for_function(
        "([k, old]) => { const h = document.querySelectorAll('.toolkit-heatmap')[k];"
        " return h && Number(h.dataset.renders) > old && h.querySelector('img').complete; }",
        arg=[index, after], timeout=90_000)
    return int(page.locator(".toolkit-heatmap").nth(index).get_attribute("data-renders"))


def test_hover_click_metric_and_difference_in_the_explorer(tmp_path):
    ex_one, ex_pair = _expected()
    notebook = _write_notebook(tmp_path / "explorer.ipynb")
    with _voila(notebook, tmp_path, extra_path=str(ROOT / "tests")) as url, _chromium(tmp_path) as page:
        page.goto(url, timeout=PAGE_TIMEOUT_MS, wait_until="commit")
        page.locator(".toolkit-heatmap").nth(1).wait_for(state="attached", timeout=PAGE_TIMEOUT_MS)
        first = _wait_rendered(page, 0)
        _wait_rendered(page, 1)
        heatmaps = page.locator(".toolkit-heatmap")

        # hover: the tooltip is the cell's text, value and tensor name included
        layer, comp = HOVER_CELL
        i, j = ex_one.current.rows.index(layer), ex_one.current.cols.index(comp)
        x, y = _cell_point(page, heatmaps.nth(0), ex_one.view.panels[0], i, j)
        page.mouse.move(x, y)
        tip = heatmaps.nth(0).locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_one.hover_text(layer, comp)
        assert "tensor: model.layers.3.mlp.down.weight" in tip.inner_text()
        page.screenshot(path=str(ARTIFACTS / "explorer_hover.png"))

        # click: the drill-down figure appears beside the heatmap
        page.mouse.click(x, y)
        drill = page.locator("img.widget-image").first
        drill.wait_for(state="visible", timeout=60_000)
        page.wait_for_function("el => el.complete && el.naturalWidth > 100", arg=drill.element_handle(),
                               timeout=30_000)
        assert "layer 3, mlp. down" in page.locator(".toolkit-cell").first.inner_text()
        page.screenshot(path=str(ARTIFACTS / "explorer_click_drilldown.png"))

        # metric: exactly one new figure in that explorer
        before = heatmaps.nth(0).locator("img").get_attribute("src")
        metric = page.locator("select").first
        metric.select_option(label="Spectral norm")
        _wait_rendered(page, 0, after=first)
        assert heatmaps.nth(0).locator("img").get_attribute("src") != before
        assert page.locator(PLOT_IMG).count() == 2  # one figure per explorer, no stale copy
        page.screenshot(path=str(ARTIFACTS / "explorer_metric_changed.png"))

        # two models: the difference view, and its tooltip names both sides
        pair_before = int(heatmaps.nth(1).get_attribute("data-renders"))
        page.get_by_role("button", name="difference (target − base)").click()
        _wait_rendered(page, 1, after=pair_before)
        ex_pair.controls["view"].value = "difference"
        x, y = _cell_point(page, heatmaps.nth(1), ex_pair.view.panels[0], i, j)
        page.mouse.move(x, y)
        tip = heatmaps.nth(1).locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_pair.hover_text(layer, comp)
        assert "(target − base)" in tip.inner_text() and "org/base:" in tip.inner_text()
        page.screenshot(path=str(ARTIFACTS / "explorer_difference.png"), full_page=True)

        # no label or button text cut off
        cut = page.evaluate("""() => [...document.querySelectorAll(
              '.widget-button, .widget-toggle-button, .widget-label, .widget-label-basic')]
            .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
            .map(e => e.innerText)""")
        assert cut == [], f"cut-off labels: {json.dumps(cut)}"
        text = page.inner_text("body")
        assert "Traceback" not in text, text[:2000]


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="needs jupyterlab (pip install jupyterlab)")
def test_hover_and_click_in_jupyterlab(tmp_path):
    ex_one, _ = _expected()
    _write_notebook(tmp_path / "explorer.ipynb")
    port = _free_port()
    lab = ["jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={tmp_path}", "--allow-root",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    with _serve(lab, tmp_path, tmp_path, port, "lab/tree/explorer.ipynb", str(ROOT / "tests")) as url, \
            _chromium(tmp_path) as page:
        page.goto(url, timeout=PAGE_TIMEOUT_MS)
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=120_000)
        page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(state="visible", timeout=120_000)  # kernel up
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        try:
            page.locator(".toolkit-heatmap").nth(1).wait_for(state="attached", timeout=120_000)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_no_heatmap.png"))
            raise
        _wait_rendered(page, 0)
        heatmap = page.locator(".toolkit-heatmap").nth(0)
        layer, comp = HOVER_CELL
        i, j = ex_one.current.rows.index(layer), ex_one.current.cols.index(comp)
        x, y = _cell_point(page, heatmap, ex_one.view.panels[0], i, j)
        page.mouse.move(x, y)
        tip = heatmap.locator(".toolkit-heatmap-tooltip")
        tip.wait_for(state="visible", timeout=10_000)
        assert tip.inner_text() == ex_one.hover_text(layer, comp)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_hover.png"))
        page.mouse.click(x, y)
        drill = page.locator("img.widget-image").first
        drill.wait_for(state="visible", timeout=60_000)
        assert "layer 3, mlp. down" in page.locator(".toolkit-cell").first.inner_text()
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_click_drilldown.png"))
