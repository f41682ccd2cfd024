"""``explore``: the explorer over Datasets, or over a checkpoint measured live."""

from __future__ import annotations

import os

from toolkit.constraint_types import Exempt
from toolkit.constraints import Check, Flag, Names, Optional, PathName, Text, Whole, checks_options
from toolkit.metrics.fit_options import FitOptions
from toolkit.widgets._model import explore_model
from toolkit.widgets.explorer import Explorer


@checks_options(data=Exempt("a Dataset or a list of them (EmptyInputError for none), a checkpoint measured by "
                            "explore_model (its typed errors), or a toolkit.watch monitor or its store folder"),
                compute=Exempt(
                    "measuring options, forwarded to explore_model (which declares them) when data is a checkpoint; "
                    "a Dataset takes none (TypeError naming them)"),
                metric=Optional(Text("a metric of the Dataset")), out_dir=PathName(), dpi=Whole(minimum=1),
                labels=Optional(Names("one label per Dataset")), read_entries=Flag(),
                fit=Optional(Check(FitOptions.coerce, {"no_such_option": 1})))
def explore(data, metric=None, *, out_dir=".", dpi=100, labels=None, read_entries=True, fit=None,
            **compute) -> Explorer:
    """Interactive heatmap panel over one or several statistics Datasets (or a checkpoint).

    Parameters
    ----------
    data : xarray.Dataset, list of xarray.Dataset, a checkpoint, or a watched run
        Metrics with dims ``(layer, component)``, ``(layer, head)`` or
        ``(layer, kv_head)``, plus any extra dims (``checkpoint``, ``head``,
        ``expert``, ``text`` ...), each of which gets a selector. A list
        (models of 28, 36, 48 layers), or a Dataset with a ``checkpoint``
        dimension, adds the views *side by side* (one panel per model, each
        with its own layer axis; separate or shared colour scale) and
        *difference* / *ratio* (target − base, target / base; when the grids
        line up). A checkpoint (hub id, folder, ``.gguf`` file; None for the
        embedded model) is measured live: :func:`toolkit.widgets.explore_model`. A
        :func:`toolkit.watch` monitor, or its store folder, gives the live view of the run
        (:class:`~toolkit.widgets.watch_view.WatchView`: a step slider following the newest record,
        each layer's line over the steps).
    metric : str, optional
        Metric shown first (default: the first one every model has).
    out_dir : str or path, default "."
        Where the save buttons write.
    dpi : int, default 100
        Of the static PNG kept for viewers without widgets.
    labels : list of str, optional
        Names of the models (default: from their attrs).
    read_entries : bool, default True
        Let opening a cell read its matrix from the source recorded in the
        Dataset (a local file) for the entry histogram, and compute its
        spectrum when the Dataset holds none.
    fit : toolkit.FitOptions or dict, optional
        The power-law fit shown first (WeightWatcher's ``fix_fingers``, ``xmax`` ...): Datasets
        measured with other options are refitted from their stored spectra
        (:func:`toolkit.collect.refit.refit`); a checkpoint is measured with it. The panel's
        "fit" menu switches between the default, ``xmax=1``, ``fix_fingers="xmin_peak"`` and
        ``"clip_xmax"`` (:mod:`toolkit.widgets.fit_choice`). Default: as the Datasets were measured.
    **compute
        With a checkpoint: options of :func:`~toolkit.widgets.explore_model`
        (``layers``, ``components``, ``experts``, ``keep_spectra`` ...).

    Returns
    -------
    Explorer
        Displays itself as the panel. Hovering a cell shows its value, tensor
        name, shape and NaN reason (:meth:`Explorer.hover_text`); a click (or
        Enter on the selected cell) draws its spectrum beside the heatmap
        (:meth:`Explorer.show_cell`).

    Raises
    ------
    toolkit.errors.EmptyInputError
        No Dataset, or no metric with layer and component/head/kv_head dims.
    toolkit.errors.UnknownMetricError
        ``metric`` is not one of them.
    toolkit.errors.ToolkitError
        ``fit`` differs from the options of Datasets that hold no spectra to refit.
    """
    import xarray as xr

    from toolkit.io.records import is_store

    if (hasattr(data, "dataset") and hasattr(data, "step")) or (
            isinstance(data, (str, os.PathLike)) and is_store(data)):  # a watched run (toolkit.watch)
        from toolkit.widgets.watch_view import WatchView

        return WatchView(data, metric, out_dir=out_dir)
    if data is None or not isinstance(data, (xr.Dataset, list, tuple)):
        return explore_model(data, metric=metric, out_dir=out_dir, dpi=dpi,
                             **({"fit": fit} if fit is not None else {}), **compute)
    if compute:
        raise TypeError(f"explore() of Datasets takes no {', '.join(sorted(compute))}: those are for measuring "
                        "a checkpoint (explore(source, ...))")
    return Explorer(data, metric, out_dir=out_dir, dpi=dpi, labels=labels, read_entries=read_entries, fit=fit)
