"""Shared scaffolding of the browser tests: a Jupyter server (Voilà or JupyterLab) on a free port and
headless Chromium driven by Playwright (Debian's /usr/bin/chromium; never ``playwright install``)."""

from __future__ import annotations

import importlib.util
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
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGE_TIMEOUT_MS = 240_000  # Voila computes the embedded model's statistics before the page is ready

MISSING = [what for what, ok in [("/usr/bin/chromium", CHROMIUM.exists()),
                                 ("voila", importlib.util.find_spec("voila") is not None),
                                 ("playwright", importlib.util.find_spec("playwright") is not None)] if not ok]
MARKS = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason=f"browser test needs {', '.join(MISSING)}: run .ci/browser-deps.sh"),
]
HAS_LAB = importlib.util.find_spec("jupyterlab") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(args: list, cwd: Path, tmp_path: Path, port: int, path: str = "", extra_path: str = ""):
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


def voila(notebook: Path, tmp_path: Path, extra_path: str = ""):
    """Serve ``notebook`` with Voila on a free port."""
    port = free_port()
    return serve(["voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
                  "--show_tracebacks=True"], notebook.parent, tmp_path, port, extra_path=extra_path)


def jupyterlab(folder: Path, notebook: str, tmp_path: Path, extra_path: str = ""):
    """Serve ``folder`` with JupyterLab on a free port; the URL opens ``notebook``."""
    port = free_port()
    lab = ["jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={folder}", "--allow-root",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    return serve(lab, folder, tmp_path, port, f"lab/tree/{notebook}", extra_path)


@contextmanager
def chromium(tmp_path, width: int = 1400, height: int = 1100):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": width, "height": height})
        try:
            yield browser.new_page()
        finally:
            browser.close()


def run_all_in_jupyterlab(page, url: str) -> None:
    """Open ``url`` in JupyterLab, wait for the kernel and run every cell."""
    page.goto(url, timeout=PAGE_TIMEOUT_MS)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible", timeout=120_000)
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(state="visible", timeout=120_000)  # kernel up
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def write_notebook(path: Path, cells: list[str]) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def centre(locator, attempts: int = 10) -> tuple[float, float]:
    """The page coordinates of the centre of ``locator``'s element, scrolled into view; located again when a
    redraw replaced the element meanwhile (one change can draw a figure twice: the figure, then its scale)."""
    from playwright.sync_api import Error

    for attempt in range(attempts):
        try:
            locator.scroll_into_view_if_needed()
            bb = locator.bounding_box()
            if bb is not None:
                return bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2
        except Error as err:
            if "not attached" not in str(err) or attempt == attempts - 1:
                raise
        locator.page.wait_for_timeout(200)
    raise AssertionError(f"{locator} has no box on the page")
