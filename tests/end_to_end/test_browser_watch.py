"""The live view of a watched run in a real browser: Voilà serves a notebook that trains a small model
under ``toolkit.watch``; headless Chromium sees the heatmap of the newest record, moves the step slider, and
watches the view follow records a background training thread adds after the page is shown."""

import _browser as B

pytestmark = B.MARKS
HEATMAP = ".toolkit-heatmap"

CELLS = [
    """import threading, time
import torch
import toolkit
from toolkit.lab.vit import ViT

torch.manual_seed(0)
model = ViT("softmax", dim=16, depth=3, heads=2)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
monitor = toolkit.watch(model, ["frobenius_norm", "stable_rank"], every=1)

def train(steps):
    for step in steps:
        x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,))
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step(); opt.zero_grad()
        monitor.step(step)
    monitor.wait()

train(range(3))""",
    """view = toolkit.widgets.explore(monitor, "relative_change_since_start").follow(0.5)
view""",
    """def later():
    time.sleep(8)
    train(range(3, 6))

threading.Thread(target=later, daemon=True).start()""",
]


def test_watch_view_shows_the_newest_record_moves_with_the_slider_and_follows_the_run(tmp_path):
    nb = B.write_notebook(tmp_path / "watch.ipynb", CELLS)
    with B.voila(nb, tmp_path) as url, B.chromium(tmp_path) as page:
        page.goto(url, timeout=B.PAGE_TIMEOUT_MS, wait_until="commit")
        page.locator(f"{HEATMAP} rect.cell").first.wait_for(state="attached", timeout=B.PAGE_TIMEOUT_MS)
        assert page.locator(f"{HEATMAP} rect.cell").count() == 12  # 3 layers x 4 module paths
        page.get_by_text("3 records, steps 0-2").wait_for(timeout=60_000)
        lines = page.locator(".toolkit-watch-lines")
        lines.wait_for(timeout=60_000)  # the per-layer lines
        first_lines = lines.get_attribute("src")
        before = int(page.locator(HEATMAP).first.get_attribute("data-renders") or 0)
        handle = page.locator(".widget-slider .noUi-handle, .widget-slider .ui-slider-handle").first
        handle.focus()
        page.keyboard.press("ArrowLeft")  # step 2 -> step 1
        page.wait_for_function("old => Number(document.querySelector('.toolkit-heatmap').dataset.renders) > old",
                               arg=before, timeout=60_000)
        page.keyboard.press("End")  # back to the newest: following again
        # the background thread adds steps 3-5 after the page is shown; the view follows them
        page.get_by_text("6 records, steps 0-5").wait_for(timeout=120_000)
        page.wait_for_function("old => document.querySelector('.toolkit-watch-lines').src !== old",
                               arg=first_lines, timeout=60_000)  # the lines are drawn again, in the main thread
        page.screenshot(path=str(B.ARTIFACTS / "watch_view.png"), full_page=True)
        text = page.inner_text("body")
        assert "Traceback" not in text
