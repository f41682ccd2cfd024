"""``explore_model``: compute a model's statistics with a progress bar, then explore them."""

from __future__ import annotations

import html

import ipywidgets as W

from toolkit.widgets.explorer import Explorer


class WidgetProgress:
    """A progress bar inside a widget, usable as ``weight_stats(progress=...)``.

    Called as ``progress(done, total, name)`` after each unit of work (the
    contract of :func:`toolkit.weight_stats`).
    """

    def __init__(self, what: str):
        self.bar = W.IntProgress(value=0, min=0, max=1, bar_style="info", description="computing")
        self.label = W.HTML(f"Computing statistics of <b>{html.escape(what)}</b> ...")
        self.detail = W.Label("opening the checkpoint \u2026")  # until the first tensor is done
        self.widget = W.VBox([self.label, W.HBox([self.bar, self.detail])])

    def __call__(self, done: int, total: int, name: str = "") -> None:
        self.bar.max = max(int(total), 1)
        self.bar.value = min(int(done), self.bar.max)
        self.detail.value = f"{done} / {total}  {name[-60:]}"

    def fail(self, err: BaseException) -> None:
        self.bar.bar_style = "danger"
        self.label.value = f"Could not compute the statistics: {html.escape(str(err))}"


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with ipywidgets
        return None
    ip = get_ipython()
    return ip if ip is not None and getattr(ip, "kernel", None) is not None else None


def explore_model(source=None, metrics=None, *, metric=None, out_dir=".", dpi=100, display=None,
                  **stats_kws) -> Explorer:
    """Compute weight statistics of a model with a progress bar, then show :func:`explore`'s panel.

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
        Put the panel on screen at once, so the progress bar is seen while
        the statistics are computed. Default: True inside a Jupyter kernel.
        The returned Explorer then does not display a second copy as the
        cell's result.
    **stats_kws
        Passed to :func:`toolkit.weight_stats` (``gguf_file``, ``revision``,
        ``mapping``, ``device``, ``cache``).

    Returns
    -------
    Explorer
        The panel; the statistics are ``.ds``.

    Raises
    ------
    Whatever :func:`toolkit.weight_stats` raises (``SourceNotFoundError``,
    ``UnsupportedArchitectureError`` ...); the panel shows the message too.
    """
    import toolkit

    shell = _shell()
    display = shell is not None if display is None else display
    progress = WidgetProgress(str(source) if source is not None else "the embedded default model")
    root = W.VBox([progress.widget])
    handle = None
    if display:
        from IPython.display import display as show

        handle = show(root, display_id=True)
    try:
        ds = toolkit.weight_stats(source, metrics, progress=progress, **stats_kws)
    except Exception as err:
        progress.fail(err)
        raise
    explorer = Explorer(ds, metric, out_dir=out_dir, dpi=dpi, root=root)
    if handle is not None:
        handle.update(explorer._repr_mimebundle_(), raw=True)  # adds the static PNG for saved notebooks
        explorer._eager_cell = shell.execution_count if shell is not None else None
    return explorer
