"""The progress line of a live pass (:func:`toolkit.widgets.explore_model`): a bar, the count, the
time spent and an estimate of the time left, drawn from the run's
:class:`~toolkit.widgets.live_pace.Pace` (the numbers are computed there, without widgets)."""

from __future__ import annotations

import html

import ipywidgets as W

from toolkit.widgets import _controls as C
from toolkit.widgets.live_pace import Pace, clock

__all__ = ["WidgetProgress", "clock"]

#: What the bar says once a segment has ended, by its style (it said "measuring" after a Stop or the end).
ENDED = {"success": "measured", "warning": "stopped"}


class WidgetProgress:
    """The progress line of a pass: a label (what is measured, or how it ended), a bar and a detail line.

    Attributes
    ----------
    bar : ipywidgets.IntProgress
    label : ipywidgets.HTML
    detail : ipywidgets.Label
        ``12 / 28 tensors · 0:41 · about 1:05 left · <tensor>``.
    widget : ipywidgets.VBox
    """

    def __init__(self, what: str):
        self.bar = W.IntProgress(value=0, min=0, max=1, bar_style="info", description="measuring",
                                 style=C.WIDE)
        self.label = W.HTML()
        self.detail = W.Label()
        self.widget = W.VBox([self.label, W.HBox([self.bar, self.detail], layout=W.Layout(flex_flow="row wrap"))])
        self.restart(what)

    def restart(self, what: str, pace: Pace | None = None) -> None:
        """A segment starts: ``Measuring <what> …``; the count of a resumed run stays."""
        self.bar.bar_style, self.bar.description = "info", "measuring"
        self.label.value = f"Measuring <b>{html.escape(what)}</b> …"
        if pace is not None and pace.done:
            self.show(pace)
        else:
            self.bar.value, self.bar.max = 0, 1
            self.detail.value = "opening the checkpoint \u2026"  # until the first tensor is done

    def first_look(self, components) -> None:
        self.detail.value = f"first look: {', '.join(components)} of every layer \u2026"

    def show(self, pace: Pace, name: str = "") -> None:
        """The bar and the detail line from ``pace``."""
        self.bar.max = max(int(pace.total), 1)
        self.bar.value = min(int(pace.done), self.bar.max)
        self.detail.value = pace.line(name)

    def stopping(self, pace: Pace) -> None:
        """Stop was pressed: said at once (a large tensor can take 20 s to finish), no time left."""
        self.bar.bar_style, self.bar.description = "warning", "stopping"
        self.label.value = "Stopping after the current tensor \u2026"
        self.detail.value = f"{pace.done} / {pace.total} tensors · {clock(pace.elapsed())} · stopping"

    def finish(self, text: str, style: str = "success", pace: Pace | None = None) -> None:
        """The segment ended: ``text`` as the label; the bar says how (``measured``, ``stopped``); the detail
        line without a time left, with how many tensors came from the cache."""
        self.bar.bar_style, self.bar.description = style, ENDED.get(style, "ended")
        self.label.value = text
        if pace is not None:
            self.show(pace)

    def fail(self, err: BaseException, elapsed: float) -> None:
        self.bar.bar_style, self.bar.description = "danger", "failed"
        self.label.value = f"Could not compute the statistics: {html.escape(str(err))}"
        self.detail.value = f"failed after {clock(elapsed)} ({type(err).__name__})"
