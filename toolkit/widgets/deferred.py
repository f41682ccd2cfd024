"""What a notebook cell shows from a live pass's result, without holding the page while it runs.

Voilà renders a notebook only once every cell has run: a cell that waits for ``explorer.ds`` kept the
live panel of :func:`toolkit.widgets.explore_model` behind a spinner until the pass ended (41 s for the
embedded model), and then showed everything at once. ``live.when_done(show)`` returns a
:class:`Deferred`: where the page waits for its cells (Voilà) and the pass is still running, it shows a
placeholder at once and puts ``show(ds)``'s result in its place when the pass ends; elsewhere (a
notebook run top to bottom, a headless runner that keeps only what a cell shows while it runs) it waits
for the pass and shows the result in the cell, as ``.ds`` would.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable

from toolkit.widgets.main_thread import in_main_thread

#: Variables Voilà sets in the kernels it starts.
VOILA_ENV = ("VOILA_KERNEL_ID", "VOILA_BASE_URL", "VOILA_SERVER_URL")


def page_waits_for_cells() -> bool:
    """Whether the front end shows the page only once every cell has run (Voilà)."""
    return any(k in os.environ for k in VOILA_ENV)


def _items(result) -> list:
    if result is None:
        return []
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _outcome(live) -> tuple:
    """``(ds, None)`` of a pass that just ended, or ``(None, what it raised)``: taken in the pass's thread,
    before another run could start."""
    try:
        return live.outcome(), None
    except Exception as err:  # noqa: BLE001 - handed on to be shown
        return None, err


def _close(item) -> None:
    """A matplotlib figure is shown once, by us (not again by the inline backend at the end of the cell)."""
    if type(item).__module__.startswith("matplotlib") and hasattr(item, "savefig"):
        import matplotlib.pyplot as plt

        plt.close(item)


class Deferred:
    """``show(ds)``'s result, shown when a live pass has its Dataset.

    Parameters
    ----------
    panel : ModelExplorer
        The live panel (``.live``, ``.wait()``).
    show : callable
        ``show(ds)`` -> None, one object or a tuple of objects to show (a figure, a DataFrame, text:
        a ``str`` is shown as printed text).
    defer : bool, optional
        Show a placeholder and fill it when the pass ends (default: only while the pass runs in the
        background and the page waits for the cells, :func:`page_waits_for_cells`).

    Attributes
    ----------
    output : ipywidgets.Output or None
        The placeholder, when deferred; filled when the pass ends.
    """

    def __init__(self, panel, show: Callable, *, defer: bool | None = None):
        self.panel, self.show, self.output = panel, show, None
        live = panel.live
        self.defer = (not live.done and page_waits_for_cells()) if defer is None else defer
        if self.defer:
            import ipywidgets as W

            self.output = W.Output()
            self.output.append_display_data(W.HTML(f"<i>shown when the measuring of {html.escape(live.what)} "
                                                   "ends (the panel above fills in meanwhile) \u2026</i>"))
            live.when_done(lambda ended: in_main_thread(self._fill, *_outcome(ended)))

    def _fill(self, ds, error: BaseException | None) -> None:
        """Put ``show(ds)`` in the placeholder, or ``error`` (the pass's): in the kernel's main thread,
        since ``show`` draws (:mod:`toolkit.widgets.main_thread`)."""
        out = self.output
        try:
            if error is not None:
                raise error
            items = _items(self.show(ds))
        except Exception as err:  # noqa: BLE001 - shown where the result would be
            out.outputs = ()
            out.append_stderr(f"{type(err).__name__}: {err}\n")
            return
        out.outputs = ()
        for item in items:
            if isinstance(item, str):
                out.append_stdout(item + "\n")
            elif hasattr(item, "_repr_mimebundle_") and hasattr(item, "_ipython_display_"):
                # an explorer: IPython's formatter would call its _ipython_display_, which displays it beside
                # the placeholder and leaves the placeholder empty; its bundle goes in instead
                out.outputs += ({"output_type": "display_data", "data": item._repr_mimebundle_(), "metadata": {}},)
            else:
                out.append_display_data(item)
                _close(item)

    def _ipython_display_(self):
        from IPython.display import display

        if self.output is not None:
            display(self.output)
            return
        for item in _items(self.show(self.panel.wait())):
            if isinstance(item, str):
                print(item)
            else:
                display(item)
                _close(item)
