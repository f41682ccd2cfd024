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


#: Tries of a server on a fresh port: between choosing a free port and the server's bind another process (a
#: kernel's ZMQ channel, the other pytest-xdist worker's server) may take it; the server is told not to move to
#: another port (``port_retries=0``: it would answer where this test does not look) and exits instead.
PORT_TRIES = 3


@contextmanager
def serve(args_for, cwd: Path, tmp_path: Path, path: str = "", extra_path: str = ""):
    """Run a Jupyter server (``args_for(port)``: the arguments after ``python -m``) on a free port until it
    answers, on a fresh port where it exits before (:data:`PORT_TRIES`); yields its URL and stops it with the
    kernels it started."""
    env = dict(os.environ, TOOLKIT_OUT=str(tmp_path / "out"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT), extra_path])))
    for attempt in range(PORT_TRIES):
        port = free_port()
        args = args_for(port)
        log_path = tmp_path / f"{args[0]}.log"
        log = open(log_path, "wb")
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}/"
        if _answers(url, proc):
            break
        _stop(proc, log)
        if attempt == PORT_TRIES - 1:
            pytest.fail(f"{args[0]} did not start:\n{log_path.read_text()[-3000:]}")
    try:
        yield url + path
    except BaseException:  # a failing test shows what the server and its kernels said
        log.flush()
        sys.stderr.write(f"--- the end of {log_path}:\n{log_path.read_text(errors='replace')[-6000:]}\n")
        raise
    finally:
        _stop(proc, log)


def _answers(url: str, proc) -> bool:
    """Whether the server at ``url`` answers within 90 s (False: its process exited first)."""
    deadline = time.monotonic() + 90
    while True:
        try:  # any HTTP answer means the server is up; the page itself may be slow (it runs the notebook)
            urllib.request.urlopen(url + "__toolkit_probe__", timeout=2)
            return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            if proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                pytest.fail(f"the server at {url} did not answer in 90 s")
            time.sleep(0.5)


def _stop(proc, log) -> None:
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
    return serve(lambda port: ["voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.port_retries=0",
                               "--Voila.ip=127.0.0.1", "--show_tracebacks=True"],
                 notebook.parent, tmp_path, extra_path=extra_path)


def jupyterlab(folder: Path, notebook: str, tmp_path: Path, extra_path: str = ""):
    """Serve ``folder`` with JupyterLab on a free port; the URL opens ``notebook``."""
    return serve(lambda port: [
        "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.port_retries=0", "--ServerApp.ip=127.0.0.1",
        "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={folder}", "--allow-root",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        folder, tmp_path, f"lab/tree/{notebook}", extra_path)


@contextmanager
def chromium(tmp_path, width: int = 1400, height: int = 1100):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": width, "height": height})
        page = browser.new_page()
        try:
            yield page
        except BaseException:  # a failing test leaves what the page showed
            _leave_page(page, tmp_path.name)
            raise
        finally:
            browser.close()


def _leave_page(page, name: str) -> None:
    """Save a screenshot of ``page`` in ``test-artifacts/failed-<name>.png`` and print its text."""
    try:
        page.screenshot(path=str(ARTIFACTS / f"failed-{name}.png"), full_page=True, timeout=20_000)
        sys.stderr.write(f"--- the page's text:\n{page.inner_text('body', timeout=20_000)[-6000:]}\n")
    except Exception as e:  # noqa: BLE001 - a page that cannot be read must not hide the test's own failure
        sys.stderr.write(f"--- the page could not be read: {e!r}\n")


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
