"""``explore_model``: measure a checkpoint and watch its cells arrive in the explorer.

The panel is put together from parts it owns: a :class:`~toolkit.widgets.live_pass.LivePass` (the pass
in a thread, Stop and Resume, the cells so far and the run's pace; no widget), the form
(:mod:`toolkit.widgets.live_form`), the progress line (:mod:`toolkit.widgets.live_progress`) and, from
the first cells on, an :class:`~toolkit.widgets.explorer.Explorer`. The pass calls
:func:`toolkit.weight_stats` with ``on_cells``; in a Jupyter kernel it runs in a background thread, so
the panel is live while it measures: the heatmap fills in (redrawn at most every ``refresh`` seconds, at
once for the first cells, and never with fewer cells than it shows), a progress line gives the count,
the time spent and the time left, and **Stop** ends the pass after the tensor being measured (said at
once), keeping every finished cell. Those cells are in the result cache: **Resume** (or the same call
again) starts where the pass stopped.

What needs the finished pass is asked for explicitly: ``.ds`` / ``.wait()`` wait for it, ``.partial``
does not, and ``.when_done(fn)`` shows ``fn(ds)`` once it ends without holding the page (Voilà renders a
notebook only when its cells have run).
"""

from __future__ import annotations

import html
import threading
import time

import ipywidgets as W

from toolkit.collect.pass_options import SELECTION, metrics_of
from toolkit.collect.weights import weight_stats
from toolkit.constraint_types import SOURCE
from toolkit.constraints import Flag, Forwarded, Optional, PathName, Real, Text, Whole, checks_options
from toolkit.widgets.explorer import Explorer
from toolkit.widgets.live_form import form_row, make_form, read_form, set_button, show_selection
from toolkit.widgets.live_pass import LivePass
from toolkit.widgets.live_plan import measured, same_source
from toolkit.widgets.live_progress import WidgetProgress
from toolkit.widgets.live_status import PassState
from toolkit.widgets.main_thread import in_main_thread


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipywidgets
        return None
    ip = get_ipython()
    return ip if ip is not None and getattr(ip, "kernel", None) is not None else None


def _same_grid(a, b) -> bool:
    """Whether two Datasets have the same rows and columns, ``b`` every variable of ``a`` (the live view then
    keeps its explorer: :meth:`~toolkit.widgets.explorer.Explorer.set_data` takes no Dataset lacking a metric
    its menu offers)."""
    return all(d in a.dims and d in b.dims and a[d].values.tolist() == b[d].values.tolist()
               for d in ("layer", "component")) and a.sizes.get("expert") == b.sizes.get("expert") \
        and all(v in b.data_vars for v in a.data_vars)


class ModelExplorer:
    """The live panel of :func:`explore_model`: a pass of :func:`toolkit.weight_stats` and its explorer.

    Attributes
    ----------
    live : LivePass
        The pass: ``state``, ``pace`` (count, time spent, time left), ``plan``.
    widget : ipywidgets.VBox
        The form, the progress line and the explorer.
    progress : WidgetProgress
    explorer : Explorer or None
        The heatmap panel, from the first finished cells on (``save_png``, ``show_cell`` ... are its).
    form : dict
        ``source``, ``layers``, ``components``, ``experts`` (text boxes), ``compute``, ``stop``
        (buttons: Stop, then Resume).
    updates : list of float
        Seconds each live redraw of the segment took (throttled: at most one per ``refresh``).
    """

    def __init__(self, source=None, metrics=None, *, metric=None, out_dir=".", dpi=100, refresh=0.5,
                 stats_kws=None):
        self.metric, self.out_dir, self.dpi = metric, out_dir, dpi
        self.live = LivePass(source, metrics, stats_kws=stats_kws, refresh=refresh, on_event=self._on_event)
        self.explorer: Explorer | None = None
        self.updates: list = []
        self._handle, self._static_shown = None, 0
        self._fresh, self._shown = False, ""  # a new source whose cells are not shown yet; what is shown
        self.progress = WidgetProgress(self.live.what)
        self.form = make_form(source, self.live.stats_kws)
        self.form["compute"].on_click(lambda _: self._start_from_form())
        self.form["stop"].on_click(lambda _: self.stop() if self.state == "running" else self._start_from_form())
        self.body = W.VBox()
        self.widget = W.VBox([form_row(self.form), self.progress.widget, self.body])

    # -- the pass -------------------------------------------------------------
    @property
    def state(self) -> PassState:
        """``"idle"``, ``"running"``, ``"done"``, ``"stopped"`` or ``"failed"`` (a :class:`PassState`)."""
        return self.live.state

    @property
    def error(self):
        return self.live.error

    @property
    def source(self):
        return self.live.source

    @property
    def stats_kws(self) -> dict:
        return self.live.stats_kws

    @property
    def first_cells_s(self):
        """Seconds from the segment's start to its first cells on screen."""
        return self.live.first_cells_s

    def start(self, *, source=..., layers=..., components=..., experts=..., background: bool | None = None):
        """(Re)start the pass: another ``source`` or selection, or the same one (Resume: the finished cells
        come from the cache). Runs in a thread inside a Jupyter kernel (``background``), else here."""
        if source is not ... and not same_source(source, self.live.source):  # the heatmap shown stays until the new
            self._fresh = True  # model's first cells replace it: a typo in the model box must not wipe it
        background = _shell() is not None if background is None else background
        self.live.start(source=source, layers=layers, components=components, experts=experts,
                        background=background)
        return self

    def stop(self) -> None:
        """Stop after the tensor being measured (said at once); the finished cells stay (and are cached)."""
        self.live.stop()

    def _start_from_form(self):
        """Measure / Resume: :meth:`start` with the form's values; text that is no selection fails the
        panel with the reason (a click handler's exception would only reach the log, the old cells
        staying on screen as if they were the answer)."""
        from toolkit.errors import InvalidOptionError

        try:
            form = read_form(self.form)
        except InvalidOptionError as err:
            self.live.fail(err)
            return self
        return self.start(**form)

    # -- what the pass says ----------------------------------------------------------
    def _on_event(self, kind: str, live: LivePass) -> None:
        getattr(self, f"_on_{kind}")(live)

    def _on_started(self, live: LivePass) -> None:
        show_selection(self.form, live.stats_kws)
        set_button(self.form, "stop")
        self.updates = []
        if self.explorer is not None:
            self.explorer.pending = True
        self.progress.restart(live.what, live.pace)

    def _on_first_look(self, live: LivePass) -> None:
        self.progress.first_look(live.look)

    def _on_progress(self, live: LivePass) -> None:
        status = live.snapshot()
        if status.stopping:  # "stopping" stays until the pass has stopped
            return
        self.progress.show(live.pace, status.name)
        if live.snapshot().stopping:  # Stop came while this line was written: say it again, over it
            self.progress.stopping(live.pace)

    def _on_cells(self, live: LivePass) -> None:
        self._show(live.partial)

    def _on_stopping(self, live: LivePass) -> None:
        self.progress.stopping(live.pace)
        self.form["stop"].disabled = True  # Resume once the pass has stopped

    def _on_ended(self, live: LivePass) -> None:
        what, pace, status = html.escape(live.what), live.pace, live.snapshot()  # one moment's state and error
        if status.state == PassState.STOPPED:
            if live.partial is not None:
                self._show(live.partial)
            self.progress.finish(f"Stopped after {pace.done} of {pace.total} tensors of <b>{what}</b> "
                                 f"({pace.summary()}); the finished cells are kept (and cached): Resume continues "
                                 "from them.", "warning", pace)
            set_button(self.form, "resume")
        elif status.state == PassState.FAILED:
            self.progress.fail(status.error, status.elapsed)
            if self._fresh and self.explorer is not None:
                self.progress.detail.value += f"; the heatmap below is still {html.escape(self._shown)}"
            set_button(self.form, "off")
        else:
            ds = live.partial
            self._show(ds, final=True)
            cells = measured(ds)
            count = f"{int(cells.sum())} cells, " if cells is not None else ""
            self.progress.finish(f"Measured <b>{what}</b>: {count}{pace.summary()}.", pace=pace)
            set_button(self.form, "off")
            in_main_thread(self._static)  # draws a PNG: never beside a cell that draws

    def _show(self, ds, *, final: bool = False) -> None:
        t0 = time.monotonic()
        if self.explorer is not None and (self._fresh or not _same_grid(self.explorer.ds, ds)):
            self.explorer = None  # another model, or another selection: controls made for its grid
        self._fresh, self._shown = False, self.live.what
        if self.explorer is None:
            plan, absent = self.live.plan, None
            if plan is not None:  # the cells still to come are empty: what the model lacks is in its plan
                absent = [str(c) for c in ds.component.values if str(c) not in plan.model_components]
            self.explorer = Explorer(ds, self.metric, out_dir=self.out_dir, dpi=self.dpi, absent=absent,
                                     pending=not final)
            self.body.children = tuple(self.explorer.widget.children)
        else:
            self.explorer.set_data(ds)
        self.explorer.pending = not final and self.state == "running"
        if final:
            self.explorer.render()
        self.updates.append(time.monotonic() - t0)

    # -- results ---------------------------------------------------------------
    def wait(self, timeout: float | None = None):
        """Wait for the pass; return its Dataset (the finished cells after a stop).

        Raises
        ------
        TimeoutError
            Still running after ``timeout`` seconds.
        Whatever :func:`toolkit.weight_stats` raised.
        """
        result = self.live.wait(timeout)
        if threading.current_thread() is threading.main_thread():
            self._static(waiting=True)
        return result

    @property
    def ds(self):
        """The statistics: waits for the pass (a stopped pass gives the cells it finished)."""
        return self.wait()

    @property
    def partial(self):
        """The Dataset of the cells finished so far (None before the first); it never loses a cell."""
        return self.live.partial

    def when_done(self, show, *, defer: bool | None = None):
        """``show(ds)``'s result on screen once the pass ends, without holding the page meanwhile
        (:class:`~toolkit.widgets.deferred.Deferred`)."""
        from toolkit.widgets.deferred import Deferred

        return Deferred(self, show, defer=defer)

    # -- display --------------------------------------------------------------
    def _static(self, *, waiting: bool = False) -> None:
        """Put the finished figure's PNG into the displayed output (what a saved notebook keeps).

        Done when the pass ends (for a live front end) and once more by the first :meth:`wait` in the
        kernel's own thread: a headless runner keeps only the messages of the cell that runs."""
        if self._handle is None or self.explorer is None or self._static_shown >= (2 if waiting else 1):
            return
        self._static_shown = 2 if waiting else 1
        self._handle.update(self._repr_mimebundle_(), raw=True)

    def _repr_mimebundle_(self, **kwargs):
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.explorer is not None and self.explorer.prepared:
            import base64

            bundle["image/png"] = base64.b64encode(self.explorer.figure_png()).decode("ascii")
        bundle["text/plain"] = f"ModelExplorer({self.live.what!r}, {self.state})"
        return bundle

    def _ipython_display_(self):
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if self._eager_cell is not None and ip is not None and ip.execution_count == self._eager_cell:
            return  # already on screen, put there by explore_model in this cell
        display(self._repr_mimebundle_(), raw=True)

    _eager_cell = None


@checks_options(source=SOURCE, metrics=metrics_of("weight")["metrics"], metric=Optional(Text("a metric name")),
                out_dir=PathName(), dpi=Whole(minimum=1),
                display=Optional(Flag()), refresh=Real(minimum=0.0), background=Optional(Flag()),
                layers=SELECTION["layers"], components=SELECTION["components"], experts=SELECTION["experts"],
                stats_kws=Forwarded(weight_stats, taken=("metrics", "progress", "on_cells", "layers", "components",
                                                         "experts", "fill")))
def explore_model(source=None, metrics=None, *, metric=None, out_dir=".", dpi=100, display=None, refresh=0.5,
                  background=None, layers=None, components=None, experts=None, **stats_kws) -> ModelExplorer:
    """Measure a checkpoint's weights and watch the cells arrive in the explorer.

    Parameters
    ----------
    source : str, path-like or None
        Hub id (``"Qwen/Qwen2.5-7B"``), local directory or ``.gguf`` file; None:
        the embedded default model (SmolLM2-135M, 30 layers).
    metrics : list of str, optional
        Metrics to compute (default: all registered).
    metric : str, optional
        Metric shown first.
    out_dir : str or path, default "."
        Where the save buttons write.
    display : bool, optional
        Put the panel on screen at once. Default: True inside a Jupyter kernel.
    refresh : float, default 0.5
        Least seconds between two redraws while cells arrive (the first cells are drawn at once).
    background : bool, optional
        Measure in a thread, so the panel (and Stop) stays live and the call returns at once.
        Default: True inside a Jupyter kernel, False elsewhere.
    layers, components, experts
        Part of the model (:func:`toolkit.weight_stats`'s selection: ``layers=slice(0, 28, 4)``,
        ``components="attn.*"``, ``experts=3``); the form in the panel takes the same as text.
    **stats_kws
        Passed to :func:`toolkit.weight_stats` (``gguf_file``, ``revision``,
        ``mapping``, ``device``, ``cache``, ``keep_spectra``, ``client``, ``fit`` (a
        :class:`~toolkit.FitOptions`: ``fix_fingers``, ``xmax`` ...; the panel's "fit" menu refits
        from the spectra kept with ``keep_spectra=True``) ...

    Returns
    -------
    ModelExplorer
        The live panel; ``.ds`` (or ``.wait()``) waits for the pass and gives its Dataset, ``.partial``
        the cells so far, ``.when_done(fn)`` shows ``fn(ds)`` once the pass ends, ``.stop()`` /
        ``.start()`` stop and resume, ``.explorer`` is the heatmap panel, ``.live`` the pass.

    Raises
    ------
    Whatever :func:`toolkit.weight_stats` raises (``SourceNotFoundError``,
    ``UnsupportedArchitectureError`` ...): at once without ``background``, else from
    ``.ds`` / ``.wait()``; the panel shows the message either way.
    """
    shell = _shell()
    display = shell is not None if display is None else display
    live = ModelExplorer(source, metrics, metric=metric, out_dir=out_dir, dpi=dpi, refresh=refresh,
                         stats_kws={**stats_kws, "layers": layers, "components": components, "experts": experts})
    if display:
        from IPython.display import display as show

        live._handle = show(live._repr_mimebundle_(), raw=True, display_id=True)
        live._eager_cell = shell.execution_count if shell is not None else None
    live.start(background=background)
    if not (shell is not None if background is None else background) and live.error is not None:
        raise live.error
    return live
