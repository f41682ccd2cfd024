"""The live view of a watched training run: the heatmap of one recorded step, a step slider that follows
the newest record, and each layer's line over the steps.

``toolkit.widgets.explore(monitor)`` (a :class:`toolkit.monitor.Monitor` in this kernel) or
``explore("run.watch")`` (a store folder another process writes) builds a :class:`WatchView`. The
heatmap is the explorer itself (hover, click, metric menu, save), fed the selected step's grid; the
update since the first record (``relative_change_since_start``, ``update_density_since_start``) is a metric
of its menu, so "the difference to step 0" is one choice away. :meth:`WatchView.follow` re-reads the
records every few seconds on a timer thread; the heatmap (drawn in the browser) follows from there, and
the matplotlib line figure is handed to the kernel's main thread
(:func:`toolkit.widgets.main_thread.in_main_thread`), so drawing never runs beside a cell.
"""

from __future__ import annotations

import os
import threading

import ipywidgets as W

from toolkit.errors import EmptyInputError, ResultsNotFoundError
from toolkit.widgets.explorer import Explorer
from toolkit.widgets.main_thread import in_main_thread


def _reader(source):
    """``read() -> Dataset`` of a monitor (its records) or a store folder (its complete records)."""
    if hasattr(source, "dataset") and hasattr(source, "step"):
        return lambda: source.dataset
    if isinstance(source, (str, os.PathLike)):
        from toolkit.io import load

        return lambda: load(source)
    raise EmptyInputError("a watch view shows a toolkit.watch monitor or its store folder; "
                          f"got {type(source).__name__}")


class WatchView:
    """The explorer of a watched run (build it with ``toolkit.widgets.explore(monitor)``).

    Parameters
    ----------
    source : toolkit.monitor.Monitor or path-like
        The monitor, or the folder of its store.
    metric : str, optional
        Shown first.
    out_dir : str or path, default "."
        Where the explorer's save buttons write.

    Attributes
    ----------
    ds : xarray.Dataset
        The records read last, dims ``(step, layer, component)``.
    explorer : Explorer
        The heatmap of the selected step.
    widget : ipywidgets.VBox

    Raises
    ------
    ResultsNotFoundError
        No record yet (call it after the first recorded step).
    """

    def __init__(self, source, metric=None, *, out_dir="."):
        self._read = _reader(source)
        self.ds = self._read()
        steps = [int(s) for s in self.ds["step"].values]
        self.slider = W.SelectionSlider(options=steps, value=steps[-1], description="step",
                                        continuous_update=False, layout=W.Layout(width="420px"))
        self.newest = W.Checkbox(value=True, description="follow the newest record", indent=False)
        self.refresh_button = W.Button(description="Refresh", icon="refresh")
        self.explorer = Explorer(self.ds.sel(step=steps[-1]), metric, out_dir=out_dir)
        comps = [str(c) for c in self.ds["component"].values]
        self.component = W.Dropdown(options=comps, value=comps[0], description="lines of")
        self.lines = W.Image(format="png", layout=W.Layout(max_width="640px"))
        self.lines.add_class("toolkit-watch-lines")
        self.lines_note = W.HTML()
        self.status = W.HTML()
        self._timer: threading.Event | None = None
        self._quiet = False
        self.slider.observe(self._on_step, names="value")
        self.component.observe(lambda _c: self.draw_lines(), names="value")
        self.explorer.controls["metric"].observe(lambda _c: self.draw_lines(), names="value")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.widget = W.VBox([W.HBox([self.slider, self.newest, self.refresh_button]), self.explorer.widget,
                              self.component, self.lines, self.lines_note, self.status])
        self.draw_lines()
        self._say()

    @property
    def metric(self) -> str:
        return str(self.explorer.controls["metric"].value)

    def _on_step(self, change) -> None:
        if self._quiet:
            return
        self.explorer.set_data(self.ds.sel(step=change["new"]))
        self.newest.value = change["new"] == self.slider.options[-1]

    def refresh(self, *, lines: bool = True) -> bool:
        """Read the records again; show the newest step when following it. Returns whether any arrived.

        ``lines=False`` leaves the line figure (matplotlib) to the caller: :meth:`follow` draws it in the
        kernel's main thread."""
        try:
            ds = self._read()
        except ResultsNotFoundError:
            return False
        steps = [int(s) for s in ds["step"].values]
        if steps == list(self.slider.options):
            return False
        follow, self.ds = self.newest.value, ds
        current = self.slider.value
        self._quiet = True  # the options change resets the value: no redraw until the step is chosen
        try:
            self.slider.options = steps
            self.slider.value = steps[-1] if follow or current not in steps else current
        finally:
            self._quiet = False
        self.explorer.set_data(ds.sel(step=self.slider.value))
        self.newest.value = follow
        if lines:
            self.draw_lines()
        self._say()
        return True

    def draw_lines(self) -> None:
        """Each layer's value of the shown metric over the steps, for the chosen component (a PNG drawn on a
        pyplot-free Figure: nothing is captured into an Output widget, which can stall a headless run)."""
        import io

        from matplotlib.figure import Figure

        from toolkit.plot.layer_lines_figure import draw_layer_lines, prepare_layer_lines

        try:
            data = prepare_layer_lines(self.ds, self.metric, self.component.value)
        except (EmptyInputError, KeyError) as exc:
            self.lines.layout.display, self.lines_note.value = "none", f"No lines: {exc}"
            return
        fig = Figure(figsize=(6.4, 3.4), dpi=90, layout="constrained")
        draw_layer_lines(data, ax=fig.add_subplot())
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        self.lines.value, self.lines.layout.display, self.lines_note.value = buf.getvalue(), None, ""

    def _say(self) -> None:
        steps = self.slider.options
        self.status.value = (f"{len(steps)} records, steps {steps[0]}-{steps[-1]}"
                             + (" (following)" if self._timer is not None and not self._timer.is_set() else ""))

    def follow(self, interval: float = 2.0) -> WatchView:
        """Re-read the records every ``interval`` seconds until :meth:`stop` (returns the view).

        The slider and the heatmap follow at once, also while a cell of the same kernel trains; the line
        figure is drawn in the kernel's main thread, so during a training cell it catches up when the
        cell ends (or on *Refresh*)."""
        self.stop()
        stop = self._timer = threading.Event()

        def loop():
            while not stop.wait(interval):
                try:  # the heatmap is drawn in the browser: refreshed from here, also while a cell trains
                    arrived = self.refresh(lines=False)
                except Exception as exc:  # noqa: BLE001 - shown, and the view keeps following
                    self.status.value = f"refresh failed: {type(exc).__name__}: {exc}"
                    continue
                if arrived:  # matplotlib is not thread-safe: the lines wait for the kernel's main thread
                    in_main_thread(self.draw_lines)

        threading.Thread(target=loop, name="toolkit-watch-view", daemon=True).start()
        self._say()
        return self

    def stop(self) -> None:
        """Stop following."""
        if self._timer is not None:
            self._timer.set()
            self._timer = None

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
