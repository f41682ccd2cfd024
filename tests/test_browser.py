"""Notebook 01 in a real browser: Voila serves it, headless Chromium changes the metric.

Needs ``/usr/bin/chromium``, ``voila`` and ``playwright`` (``.ci/browser-deps.sh``
installs them; never ``playwright install``). Leaves a screenshot in
``test-artifacts/``.
"""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_weight_heatmaps.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGE_TIMEOUT_MS = 240_000  # Voila computes the embedded model's statistics before the page is ready
PLOT_IMG = ".jupyter-widgets-output-area img, .widget-output img"

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


@pytest.fixture
def voila_url(tmp_path):
    port = _free_port()
    env = dict(os.environ, TOOLKIT_OUT=str(tmp_path / "out"),
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)])))
    log = open(tmp_path / "voila.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "voila", str(NOTEBOOK), "--no-browser", f"--port={port}",
         "--Voila.ip=127.0.0.1", "--show_tracebacks=True"],
        cwd=NOTEBOOK.parent, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:  # any HTTP answer means the server is up; the page itself is slow (it runs the notebook)
                urllib.request.urlopen(url + "__toolkit_probe__", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"voila did not start:\n{(tmp_path / 'voila.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # voila and the kernels it started
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_metric_change_redraws_the_heatmap(voila_url, tmp_path):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 1000})
        try:
            page = browser.new_page()
            page.goto(voila_url, timeout=PAGE_TIMEOUT_MS, wait_until="commit")
            metric = page.locator("select").first
            metric.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
            img = page.locator(PLOT_IMG).first
            img.wait_for(state="visible", timeout=60_000)
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
            assert page.locator(PLOT_IMG).count() == 1  # the output area holds one figure
            page.locator(PLOT_IMG).first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "notebook01_metric_changed.png"), full_page=True)
            text = page.inner_text("body")
            for bad in ("Traceback", "Error"):
                assert bad not in text, f"page shows {bad!r}: ...{text[max(0, text.find(bad) - 300):][:800]}"
            assert target in text
        finally:
            browser.close()
