"""The progress line of a live pass (:func:`toolkit.widgets.explore_model`): a bar, the count, the
time spent and an estimate of the time left."""

from __future__ import annotations

import html
import time

import ipywidgets as W

from toolkit.widgets import _controls as C


def clock(seconds: float) -> str:
    """``seconds`` as ``m:ss`` past a minute, else ``N s``."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


class WidgetProgress:
    """The progress line of a pass, usable as ``weight_stats(progress=...)``.

    Called as ``progress(done, total, name)`` after each stored tensor (the
    contract of :func:`toolkit.weight_stats`): the bar, ``done / total``,
    the time spent, an estimate of the time left (from the pace since the
    first tensor) and the last tensor's name.
    """

    def __init__(self, what: str):
        self.bar = W.IntProgress(value=0, min=0, max=1, bar_style="info", description="measuring",
                                 style=C.WIDE)
        self.label = W.HTML(f"Measuring <b>{html.escape(what)}</b> …")
        self.detail = W.Label("opening the checkpoint \u2026")  # until the first tensor is done
        self.widget = W.VBox([self.label, W.HBox([self.bar, self.detail], layout=W.Layout(flex_flow="row wrap"))])
        self.started = time.monotonic()
        self._first: tuple | None = None  # (time, done) of the first report: cached tensors come in a burst
        self.eta: float | None = None

    def restart(self, what: str) -> None:
        self.bar.bar_style, self.bar.value, self.bar.max = "info", 0, 1
        self.label.value = f"Measuring <b>{html.escape(what)}</b> …"
        self.detail.value = "opening the checkpoint \u2026"
        self.started, self._first, self.eta = time.monotonic(), None, None

    def __call__(self, done: int, total: int, name: str = "") -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (now, done)
        t0, d0 = self._first
        self.eta = (now - t0) / (done - d0) * (total - done) if done > d0 else None
        self.bar.max = max(int(total), 1)
        self.bar.value = min(int(done), self.bar.max)
        left = f" · about {clock(self.eta)} left" if self.eta is not None and done < total else ""
        self.detail.value = f"{done} / {total} tensors · {clock(now - self.started)}{left} · {name[-60:]}"

    def finish(self, text: str, style: str = "success") -> None:
        self.bar.bar_style = style
        self.label.value = text

    def fail(self, err: BaseException) -> None:
        self.bar.bar_style = "danger"
        self.label.value = f"Could not compute the statistics: {html.escape(str(err))}"
        self.detail.value = f"failed after {clock(time.monotonic() - self.started)} ({type(err).__name__})"
