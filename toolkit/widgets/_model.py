"""``explore_model``: measure a checkpoint and watch its cells arrive in the explorer.

The pass runs :func:`toolkit.weight_stats` with ``on_cells`` (the collect
hook that hands over the Dataset of the cells finished so far). In a Jupyter
kernel it runs in a background thread, so the panel is live while it
measures: the heatmap fills in (redrawn at most every ``refresh`` seconds,
and at once for the first cells), a progress line gives the count, the time
spent and an estimate of the time left, and **Stop** ends the pass after the
tensor being measured, keeping every finished cell. Those cells are in the
result cache: **Resume** (or the same call again) starts where the pass
stopped. A small form above it takes another model and a selection
(``layers``, ``components``, ``experts``), so a page without code (Voilà)
can measure what its reader chooses.
"""

from __future__ import annotations

import html
import threading
import time

import ipywidgets as W
import numpy as np

from toolkit.collect.pass_options import SELECTION
from toolkit.collect.weights import weight_stats
from toolkit.constraints import Flag, Forwarded, MetricNames, Optional, PathName, Real, Text, Whole, checks_options
from toolkit.errors import PassStopped
from toolkit.widgets import _controls as C
from toolkit.widgets.explorer import Explorer
from toolkit.widgets.live_progress import WidgetProgress, clock

#: A model whose largest matrix has more entries than this gets a first look: its smallest matrices
#: measured before the rest (SmolLM2's largest has 0.9 M; a 7B model's 68 M).
FIRST_LOOK_ENTRIES = 4_000_000
#: Options a plan takes besides the address (SourceRequest's; the others are the pass's).
PLAN_OPTIONS = ("mapping", "cache")


def first_look(plan, stats_kws: dict, *, count: int = 2):
    """``(layers, components)`` of the ``count`` smallest matrices of the first layer, when the model is
    large enough for the order to matter and no selection was asked for; else None.

    A pass reads its tensors in file order, where a 7B model's first layer starts with its largest
    matrices (``mlp.down_proj``: 40 s to the first cell on 2 cores). Measuring the smallest first (its
    ``attn.k`` and ``attn.v``, under a second) puts cells on screen at once; the pass that follows finds
    them in the cache. Only the plan is read here (the stored tensors' shapes), no tensor.
    """
    import math

    if plan is None or any(stats_kws.get(k) is not None for k in ("layers", "components", "experts")) \
            or not stats_kws.get("cache", True):
        return None
    sizes = [(math.prod(t.record.shape) // len(t.pieces), p) for t in plan.tensors for p in t.pieces
             if p.expert is None]
    if not sizes or max(n for n, _ in sizes) <= FIRST_LOOK_ENTRIES:
        return None
    first = min(p.layer for _, p in sizes)
    smallest = sorted((n, p.component) for n, p in sizes if p.layer == first)[:count]
    return [first], sorted({c for _, c in smallest}, key=plan.model_components.index)


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipywidgets
        return None
    ip = get_ipython()
    return ip if ip is not None and getattr(ip, "kernel", None) is not None else None


def _text_of(value) -> str:
    """A selection as the form's text (``slice(0, 28, 4)`` -> ``0:28:4``)."""
    if value is None:
        return ""
    if isinstance(value, slice):
        return ":".join("" if v is None else str(v) for v in (value.start, value.stop, value.step)).rstrip(":")
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, range)):
        return ",".join(map(str, value))
    return str(value)


def _same_grid(a, b) -> bool:
    """Whether two Datasets have the same rows and columns (the live view then keeps its explorer)."""
    return all(d in a.dims and d in b.dims and a[d].values.tolist() == b[d].values.tolist()
               for d in ("layer", "component")) and a.sizes.get("expert") == b.sizes.get("expert")


class ModelExplorer:
    """The live panel of :func:`explore_model`: a pass of :func:`toolkit.weight_stats` and its explorer.

    Attributes
    ----------
    widget : ipywidgets.VBox
        The form, the progress line and the explorer.
    progress : WidgetProgress
    explorer : Explorer or None
        The heatmap panel, from the first finished cells on.
    form : dict
        ``source``, ``layers``, ``components``, ``experts`` (text boxes), ``compute``, ``stop``
        (buttons: Stop, then Resume).
    state : str
        ``"running"``, ``"done"``, ``"stopped"`` or ``"failed"``.
    first_cells_s : float or None
        Seconds from the call to the first cells on screen.
    updates : list of float
        Seconds each live redraw took (throttled: at most one per ``refresh``).

    Anything else (``save_png``, ``show_cell``, ``controls`` ...) is the
    explorer's, once the pass has finished (the attribute waits for it).
    """

    def __init__(self, source=None, metrics=None, *, metric=None, out_dir=".", dpi=100, refresh=0.5,
                 stats_kws=None):
        self.metrics, self.metric, self.out_dir, self.dpi, self.refresh = metrics, metric, out_dir, dpi, refresh
        self.stats_kws = {k: v for k, v in (stats_kws or {}).items()
                          if not (k in ("layers", "components", "experts") and v is None)}
        selection = {k: self.stats_kws.get(k) for k in ("layers", "components", "experts")}
        self.source = source
        self.explorer: Explorer | None = None
        self.state, self.error, self.first_cells_s, self.updates = "running", None, None, []
        self._result = None
        self._partial = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._last_draw = 0.0
        self._latest = None  # the newest partial() of the pass
        self._plan = None
        self._handle, self._static_shown = None, 0
        self._fresh, self._shown = False, ""  # a new source whose cells are not shown yet; what is shown
        self.progress = WidgetProgress(self._what())
        c = self.form = {
            "source": W.Text(value="" if source is None else str(source), placeholder="the embedded SmolLM2-135M",
                             description="model", style=C.WIDE, layout=W.Layout(width="26em"),
                             tooltip="a hub id, a folder of safetensors or a .gguf file"),
            "layers": W.Text(value=_text_of(selection["layers"]), placeholder="all", description="layers",
                             style=C.WIDE, layout=W.Layout(width="10em"), tooltip="3, -1, 0,4,8 or 0:28:4"),
            "components": W.Text(value=_text_of(selection["components"]), placeholder="all",
                                 description="components", style=C.WIDE, layout=W.Layout(width="16em"),
                                 tooltip="attn.q,mlp.router, attn.* or attn"),
            "experts": W.Text(value=_text_of(selection["experts"]), placeholder="all", description="experts",
                              style=C.WIDE, layout=W.Layout(width="9em"), tooltip="routed experts: 3 or 0:8"),
            "compute": C.button("Measure", "play", "measure this model and selection (cells already measured come "
                                                   "from the cache)"),
            "stop": C.button("Stop", "stop", "stop after the tensor being measured; the finished cells stay, and "
                                             "Resume continues from them"),
        }
        c["compute"].on_click(lambda _: self._start_from_form())
        c["stop"].on_click(lambda _: self.stop() if self.state == "running" else self._start_from_form())
        self.body = W.VBox()
        self.widget = W.VBox([W.HBox([c["source"], c["layers"], c["components"], c["experts"], c["compute"],
                                      c["stop"]], layout=W.Layout(flex_flow="row wrap", align_items="center")),
                              self.progress.widget, self.body])
        self._started_at = time.monotonic()

    # -- the pass -------------------------------------------------------------
    def _what(self) -> str:
        return str(self.source) if self.source is not None else "the embedded default model"

    def _form(self) -> dict:
        """The form's source and selection.

        Raises
        ------
        InvalidOptionError
            Text that is no selection (``layers`` "abc", "1.5", an empty component name).
        """
        from toolkit.collect.plan.selection import parse_index, parse_names
        from toolkit.errors import InvalidOptionError

        c = self.form
        got = {"source": c["source"].value.strip() or None}
        for key, parse in (("layers", parse_index), ("components", parse_names), ("experts", parse_index)):
            text = c[key].value.strip()
            try:
                got[key] = parse(text) if text else None
            except ValueError:
                expected = ("names separated by commas (attn.q,mlp.up; patterns such as attn.*)" if key == "components"
                            else "an index (3, -1), a list (0,4,8) or a slice (0:28:4)")
                raise InvalidOptionError(key, text, expected, "toolkit.explore_model form") from None
        return got

    def _start_from_form(self):
        """Compute / Resume: :meth:`start` with the form's values; text that is no selection fails the
        panel with the reason (a click handler's exception would only reach the log, the old cells
        staying on screen as if they were the answer)."""
        from toolkit.errors import InvalidOptionError

        try:
            form = self._form()
        except InvalidOptionError as err:
            if self._thread is not None and self._thread.is_alive():
                self._stop.set()
                self._thread.join()
            self.state, self.error, self._result, self._partial = "failed", err, None, None
            self.progress.fail(err)
            self.form["stop"].disabled = True
            self._done.set()
            return self
        return self.start(**form)

    def start(self, *, source=..., layers=..., components=..., experts=..., background: bool | None = None):
        """(Re)start the pass: another ``source`` or selection, or the same one (Resume: the finished cells
        come from the cache). Runs in a thread inside a Jupyter kernel (``background``), else here."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        if source is not ...:
            if source != self.source:  # the heatmap shown stays until the new model's first cells replace it:
                self._fresh = True     # a typo in the model box must not wipe it
            self.source = source
        for key, value in (("layers", layers), ("components", components), ("experts", experts)):
            if value is not ...:
                self.stats_kws[key] = value
                if value is None:
                    self.stats_kws.pop(key, None)
                self.form[key].value = _text_of(value)
        self._stop.clear()
        self._done.clear()
        self.state, self.error, self._result, self._partial = "running", None, None, None
        self._started_at, self._last_draw, self._static_shown, self._latest = time.monotonic(), 0.0, 0, None
        self.first_cells_s, self.updates = None, []
        self.progress.restart(self._what())
        self.form["stop"].description, self.form["stop"].icon = "Stop", "stop"
        self.form["stop"].disabled = False
        background = _shell() is not None if background is None else background
        if background:
            self._thread = threading.Thread(target=self._run, name="toolkit-explore-model", daemon=True)
            self._thread.start()
        else:
            self._run()
        return self

    def _run(self) -> None:
        import toolkit

        if self.explorer is not None:
            self.explorer.pending = True
        try:
            self._plan = self._open_plan()
            self._first_look()
            ds = toolkit.weight_stats(self.source, self.metrics, progress=self.progress, on_cells=self._cells,
                                      **self.stats_kws)
        except PassStopped:
            self.state = "stopped"
            done, total = self.progress.bar.value, self.progress.bar.max
            if self._latest is not None:
                self._partial = self._latest()
                self._partial.attrs["stopped"] = f"after {done} of {total} tensors"
                self._show(self._partial)
            self.progress.finish(f"Stopped after {done} of {total} tensors of <b>{html.escape(self._what())}</b>; "
                                 "the finished cells are kept (and cached): Resume continues from them.", "warning")
            self.form["stop"].description, self.form["stop"].icon = "Resume", "play"
            self._result = self._partial
        except Exception as err:  # noqa: BLE001 - shown in the panel, raised again by .ds / wait()
            self.state, self.error = "failed", err
            self.progress.fail(err)
            if self._fresh and self.explorer is not None:
                self.progress.detail.value += f"; the heatmap below is still {html.escape(self._shown)}"
            self.form["stop"].disabled = True
        else:
            self.state, self._result = "done", ds
            self._show(ds, final=True)
            self.progress.finish(f"Measured <b>{html.escape(self._what())}</b>: {self.progress.bar.max} tensors in "
                                 f"{clock(time.monotonic() - self._started_at)}.")
            self.form["stop"].disabled = True
            self._static()
        finally:
            self._done.set()

    def _open_plan(self):
        """The checkpoint's plan (cached: the pass reads it again for free): which matrices the model
        has and their shapes. None when it cannot be made here (the pass then says why)."""
        from toolkit.collect.plan import plan_pieces
        from toolkit.errors import ToolkitError
        from toolkit.sources import SourceRequest

        try:
            return plan_pieces(SourceRequest.from_options(self.source, self.stats_kws),
                               **{k: self.stats_kws[k] for k in PLAN_OPTIONS if k in self.stats_kws})
        except (ToolkitError, OSError):
            return None

    def _first_look(self) -> None:
        """Measure and show the smallest matrices of a large model first (:func:`first_look`)."""
        import toolkit

        look = first_look(self._plan, self.stats_kws)
        if look is None:
            return
        layers, components = look
        self.progress.detail.value = f"first look: layer {layers[0]} {', '.join(components)} \u2026"
        ds = toolkit.weight_stats(self.source, self.metrics, progress=False, fill=True, layers=layers,
                                  components=components, **self.stats_kws)
        reason = ds.nan_reason.values.astype(str)
        unmeasured = np.char.startswith(reason, "not selected")  # here: not measured yet, the pass follows
        ds = ds.assign_coords(nan_reason=(ds.nan_reason.dims, np.where(unmeasured, "", reason)))
        if self._stop.is_set():
            raise PassStopped
        self._latest, self._partial = (lambda: ds), ds
        self._show(ds)
        self._last_draw = time.monotonic()

    def _cells(self, partial) -> None:
        """``on_cells`` of the pass: stop if asked; redraw at most every ``refresh`` s (the first at once)."""
        if self._stop.is_set():
            raise PassStopped
        self._latest = partial
        if self.explorer is not None and time.monotonic() - self._last_draw < self.refresh:
            return
        self._partial = partial()
        self._show(self._partial)
        self._last_draw = time.monotonic()

    def _show(self, ds, *, final: bool = False) -> None:
        t0 = time.monotonic()
        if self.explorer is not None and (self._fresh or not _same_grid(self.explorer.ds, ds)):
            self.explorer = None  # another model, or another selection: controls made for its grid
        self._fresh, self._shown = False, self._what()
        if self.explorer is None:
            absent = None
            if self._plan is not None:  # the cells still to come are empty: what the model lacks is in its plan
                absent = [str(c) for c in ds.component.values if str(c) not in self._plan.model_components]
            self.explorer = Explorer(ds, self.metric, out_dir=self.out_dir, dpi=self.dpi, absent=absent,
                                     pending=not final)
            self.body.children = tuple(self.explorer.widget.children)
        else:
            self.explorer.set_data(ds)
        self.explorer.pending = not final and self.state == "running"
        if final:
            self.explorer.render()
        if self.first_cells_s is None:
            self.first_cells_s = time.monotonic() - self._started_at
        self.updates.append(time.monotonic() - t0)

    def stop(self) -> None:
        """Stop after the tensor being measured; the finished cells stay (and are cached)."""
        self._stop.set()

    # -- results ---------------------------------------------------------------
    def wait(self, timeout: float | None = None):
        """Wait for the pass; return its Dataset (the finished cells after a stop).

        Raises
        ------
        TimeoutError
            Still running after ``timeout`` seconds.
        Whatever :func:`toolkit.weight_stats` raised.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"the pass over {self._what()} is still running")
        if self.error is not None:
            raise self.error
        if threading.current_thread() is threading.main_thread():
            self._static(waiting=True)
        return self._result

    @property
    def ds(self):
        """The statistics: waits for the pass (a stopped pass gives the cells it finished)."""
        return self.wait()

    @property
    def partial(self):
        """The Dataset of the cells finished so far (None before the first)."""
        return self._result if self._result is not None else self._partial

    def __getattr__(self, name):
        if name.startswith("_") or name in ("explorer", "state", "form"):
            raise AttributeError(name)
        self.wait()
        if self.explorer is None:
            raise AttributeError(name)
        return getattr(self.explorer, name)

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
        bundle["text/plain"] = f"ModelExplorer({self._what()!r}, {self.state})"
        return bundle

    def _ipython_display_(self):
        from IPython import get_ipython
        from IPython.display import display

        ip = get_ipython()
        if self._eager_cell is not None and ip is not None and ip.execution_count == self._eager_cell:
            return  # already on screen, put there by explore_model in this cell
        display(self._repr_mimebundle_(), raw=True)

    _eager_cell = None


@checks_options(metrics=MetricNames("weight"), metric=Optional(Text("a metric name")), out_dir=PathName(),
                dpi=Whole(minimum=1),
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
        ``mapping``, ``device``, ``cache``, ``keep_spectra``, ``client`` ...).

    Returns
    -------
    ModelExplorer
        The live panel; ``.ds`` waits for the pass and gives its Dataset, ``.partial`` the cells so
        far, ``.stop()`` / ``.start()`` stop and resume, ``.explorer`` is the heatmap panel.

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
    for key in ("layers", "components", "experts"):
        if live.stats_kws.get(key) is None:
            live.stats_kws.pop(key, None)
    if display:
        from IPython.display import display as show

        live._handle = show(live._repr_mimebundle_(), raw=True, display_id=True)
        live._eager_cell = shell.execution_count if shell is not None else None
    live.start(background=background)
    if not (shell is not None if background is None else background) and live.error is not None:
        raise live.error
    return live
