"""``weight_stats``: the toolkit's main job, checkpoint -> (layer, component) Dataset."""

from __future__ import annotations

from collections.abc import Callable

import xarray as xr

from toolkit import options
from toolkit.collect.cache import cache_run, open_cache
from toolkit.collect.executors import executor_for
from toolkit.collect.grid import build_grid_dataset
from toolkit.collect.lowrank_cells import measurement_for
from toolkit.collect.pipeline import run_units
from toolkit.collect.plan import plan_pieces
from toolkit.collect.progress import opening_progress
from toolkit.collect.weight_cells import WeightMeasurement
from toolkit.metrics.fit_options import FitOptions


def weight_stats(
    source=None,
    metrics=None,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    mapping=None,
    device: str = "cpu",
    progress: bool | Callable[[int, int, str], None] = True,
    cache: bool = True,
    client=None,
    keep_spectra: bool = False,
    quality_thresholds: tuple[float, float] = (2.0, 6.0),
    precision: str = "float64",
    fit=None,
    per_head: bool = False,
) -> xr.Dataset:
    """Statistics of every weight matrix of a checkpoint, per layer and component.

    Tensors are streamed from the file (the model is never instantiated),
    dequantised to float32, split into canonical components and measured;
    reading overlaps with measuring, on up to two pipelines that share
    torch's thread budget (:mod:`toolkit.collect.stream`), so peak memory
    stays within a few times the largest tensor.

    Parameters
    ----------
    source : str, path-like, toolkit.sources.Source or None
        Hub id (``"Qwen/Qwen2.5-7B"``), local directory (safetensors, sharded
        safetensors, ``pytorch_model.bin``), or ``.gguf`` file. None: the
        embedded default model, SmolLM2-135M-Instruct (GGUF Q4_1, 30 layers).
    metrics : list of str, optional
        Registered weight metric names; None computes every registered one
        (``toolkit.list_metrics()``).
    gguf_file : str, optional
        File name inside ``source`` when it is a directory or hub repo of GGUF files.
    revision : str, optional
        Hub revision (branch, tag or commit).
    mapping : toolkit.Mapping, optional
        Custom parameter-name -> component mapping for an unknown family.
    device : str
        Device for the spectral work (``"cpu"`` or ``"cuda"``).
    progress : bool or callable
        True: a tqdm bar over tensors; a callable ``progress(done, total, name)``
        is called after each tensor (used by the notebook widget).
    cache : bool
        Reuse and store the plan (:mod:`toolkit.collect.plan_cache`) and the
        per-matrix results in the on-disk cache (:mod:`toolkit.collect.cache`;
        ``$TOOLKIT_CACHE_DIR``), so a re-run is near-instant and an interrupted
        run computes only what is missing.
    client : distributed.Client or str, optional
        Run on a Dask cluster (a client or a scheduler address such as
        ``"tcp://host:8786"``): one task per stored tensor, read by the
        workers themselves; the same Dataset (:mod:`toolkit.collect.executors`).
    keep_spectra : bool, default False
        Add every matrix's eigenvalues of WᵀW as ``eigenvalues`` (layer,
        component, index), descending, NaN-padded. They are kept with the
        cell in the cache, so a later call (or a cell's ESD figure) needs no
        recomputation.
    quality_thresholds : (float, float), default (2.0, 6.0)
        ``(over, under)``: with ``alpha`` among the metrics, the string
        coordinate ``quality`` labels each cell ``over-trained`` (α < over),
        ``under-trained`` (α > under), ``ok``, or ``not fitted: <reason>``
        (WeightWatcher's warnings; the thresholds are recorded in its attrs).
    precision : {"float64", "float32"}, default "float64"
        Of the singular values (:func:`toolkit.metrics.singular_values`).
        ``"float32"`` forms the Gram matrix in float32 (its eigensolve stays
        float64): 1.7x faster on 7B-sized matrices, 1.2x on SmolLM2, and agrees with
        float64 on the spectral norm, stable and effective rank and the
        power-law fit (measured: ``docs/scaling.md``); the condition number,
        matrix rank, rank loss and spectral entropy, which read the smallest
        singular values, are NaN with the reason where float32 cannot resolve
        them. Recorded as the attr ``spectral_precision``; results of the two
        precisions are cached apart.
    fit : toolkit.FitOptions or dict, optional
        Options of the spectral fits (:class:`~toolkit.metrics.fit_options.FitOptions`:
        ``fix_fingers``, ``xmax``, ``xmin_max``, ``max_fingers``,
        ``finger_thresh``, WeightWatcher's skip rules ``min_evals`` /
        ``max_evals`` / ``max_N``, the randomized metrics' ``seed``); None:
        WeightWatcher 0.7.7's defaults. Each is part of the cache key of the
        metrics that take it and recorded in the attrs as ``fit_<name>``.
    per_head : bool, default False
        Also the spectrum of each attention head's slice
        (:mod:`toolkit.metrics.per_head`): ``alpha_per_head``,
        ``stable_rank_per_head``, ``spectral_norm_per_head`` (layer,
        component, head) for ``attn.q`` / ``attn.o`` and ``..._per_kv_head``
        (layer, component, kv_head) for ``attn.k`` / ``attn.v``; a second,
        cached pass over the attention tensors, in this process (also with
        ``client``), without a progress bar.

    Returns
    -------
    xarray.Dataset
        Dims ``(layer, component)``; one float64 variable per metric with
        attrs ``long_name``, ``units``, ``description``, ``reference``; coords
        ``parameter_name``, ``n_rows``, ``n_cols``, ``nan_reason``; attrs
        describing the source (``source``, ``format``, ``model_type``,
        ``num_hidden_layers``, ``storage_dtype``, ``fingerprint``,
        ``revision``, ``toolkit_version``, ``created``). Components the
        architecture lacks are NaN.

    Raises
    ------
    SourceNotFoundError, CheckpointFileError
        The source cannot be found or read.
    UnsupportedArchitectureError
        No component mapping for the model type (pass ``mapping=``).
    UnmappedParametersError
        No parameter maps to a component, or the layers found disagree with
        the config.
    UnknownMetricError
        A name in ``metrics`` is not registered.
    InvalidOptionError
        An empty ``metrics`` list, a flag that is not a bool, a ``progress``
        that is neither a bool nor a callable, a ``precision`` other than
        "float64" or "float32", a ``fit`` option it cannot take... (before
        any work).

    Examples
    --------
    >>> ds = toolkit.weight_stats()                      # doctest: +SKIP
    >>> toolkit.plot.heatmap(ds, "stable_rank")          # doctest: +SKIP
    """
    where = "toolkit.weight_stats"
    metrics, mapping, progress, cache = options.collect_options(where, metrics=metrics, kind="weight",
                                                                mapping=mapping, progress=progress, cache=cache)
    bounds = quality_bounds(quality_thresholds)  # before any work
    precision = checked_precision(precision, where)
    fit = FitOptions.coerce(fit, where)
    per_head = options.flag(per_head, "per_head", where)
    measurement = WeightMeasurement.make(metrics, device, spectra=keep_spectra, fit=fit, precision=precision)
    with cache_run(), executor_for(client, device) as executor, opening_progress(progress, "weights") as report:
        plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping, cache=cache)
        measurement = measurement_for(plan, measurement)  # a LoRA adapter: measured from its factors
        store = open_cache(plan.value_identity, measurement.kind, enabled=cache)
        report.begin(len(plan.tensors))
        results = run_units(measurement, plan.tensors, store, executor, report.step, [plan.source])
    cells = {key: cell for got in results for key, cell in got.items()}
    attrs = {**plan.attrs(), "spectral_precision": precision}
    ds = build_grid_dataset(plan.num_layers, cells, list(measurement.chosen), attrs, spectra=keep_spectra)
    ds = with_fit_options(ds, fit, measurement.chosen)
    if per_head:
        from toolkit.collect.head_stats import with_head_stats

        ds = with_head_stats(ds, plan, fit=fit, device=device, cache=cache)
    return with_quality(ds, bounds)


def checked_precision(precision, where: str = "") -> str:
    """``precision`` if it is ``"float64"`` or ``"float32"``.

    Raises
    ------
    InvalidOptionError
        Any other value.
    """
    from toolkit.errors import InvalidOptionError
    from toolkit.metrics.spectral import PRECISIONS

    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise InvalidOptionError("precision", precision, "'float64' (the default) or 'float32'", where)
    return precision


def with_fit_options(ds: xr.Dataset, fit: FitOptions, metrics) -> xr.Dataset:
    """``ds`` with ``fit`` recorded (Dataset attrs ``fit_<name>``; attr ``fit_options`` of each
    variable whose metric takes options) and WeightWatcher's skip rules applied.

    With ``min_evals`` / ``max_evals`` / ``max_N`` set, every metric of a cell
    WeightWatcher would skip is NaN and its ``nan_reason`` says why
    (:meth:`FitOptions.skip_reason`); the spectra stay.
    """
    import numpy as np

    ds = ds.copy()
    ds.attrs.update(fit.attrs())
    for m in metrics:
        if m.options and m.name in ds:
            ds[m.name].attrs["fit_options"] = ", ".join(f"{k}={v!r}" for k, v in m.options)
    rows, cols = ds.n_rows.values, ds.n_cols.values
    skip = np.array([[fit.skip_reason(int(r), int(c)) if r > 0 else "" for r, c in zip(rr, cc, strict=True)]
                     for rr, cc in zip(rows, cols, strict=True)], dtype=object).reshape(rows.shape)
    hit = skip != ""
    if hit.any():
        for m in metrics:
            ds[m.name] = ds[m.name].where(~hit)
        old = ds.nan_reason.values.astype(object)
        joined = np.where(hit, np.where(old != "", skip + "; " + old, skip), old)
        ds = ds.assign_coords(nan_reason=(("layer", "component"), joined.astype(str), ds.nan_reason.attrs))
    return ds


def quality_bounds(thresholds) -> tuple[float, float]:
    """``(over, under)`` as floats.

    Raises
    ------
    ToolkitError
        ``thresholds`` is not two finite numbers with over <= under.
    """
    import math

    from toolkit.errors import ToolkitError

    try:
        over, under = (float(t) for t in thresholds)
    except (TypeError, ValueError):
        raise ToolkitError(f"quality_thresholds must be two numbers (over, under), got {thresholds!r}") from None
    if not (math.isfinite(over) and math.isfinite(under) and over <= under):
        raise ToolkitError(f"quality_thresholds must be finite with over <= under, got {thresholds!r}")
    return over, under


def with_quality(ds: xr.Dataset, thresholds=(2.0, 6.0)) -> xr.Dataset:
    """``ds`` with the string coordinate ``quality`` (layer, component) from its ``alpha``
    (:func:`toolkit.metrics.esd_fit.esd_quality`); ``ds`` unchanged without ``alpha``.

    Raises
    ------
    ToolkitError
        As :func:`quality_bounds`.
    """
    import numpy as np

    from toolkit.metrics.esd_fit import esd_quality

    over, under = quality_bounds(thresholds)
    if "alpha" not in ds:
        return ds
    reasons = np.where(ds.n_rows.values > 0, ds.nan_reason.values, "no such matrix in this model")
    labels = np.asarray(esd_quality(ds.alpha.values, over=over, under=under, reason=reasons), dtype=str)
    return ds.assign_coords(quality=(("layer", "component"), labels, {
        "long_name": "ESD quality from alpha",
        "description": f"over-trained: alpha < {over:g}; under-trained: alpha > {under:g}; ok between; "
                       "else why alpha could not be fitted",
        "over_trained_below": over, "under_trained_above": under,
        "reference": "Martin & Mahoney 2021; WeightWatcher's warning column"}))


def cell_spectrum(source=None, *, layer: int, component: str, metrics=("alpha", "alpha_xmin"),
                  gguf_file: str | None = None, revision: str | None = None, mapping=None, device: str = "cpu",
                  cache: bool = True, expert: int | None = None, fit=None) -> xr.Dataset:
    """The Dataset of one cell with its spectrum, computing only that matrix.

    The same pipeline and cache as :func:`weight_stats` (``keep_spectra=True``),
    for one (layer, component): a later ``weight_stats`` finds the cell cached,
    and a cell already cached with its spectrum is not read again.

    Parameters
    ----------
    source, gguf_file, revision, mapping, device, cache, fit
        As :func:`weight_stats`.
    layer : int
    component : str
    metrics : sequence of str
        Weight metrics to compute with it (default: the power-law fit).
    expert : int, optional
        The routed expert, for an expert component of an MoE layer (required there).

    Returns
    -------
    xarray.Dataset
        As :func:`weight_stats` with ``eigenvalues``; every other cell NaN.
        With ``expert``: the expert's matrix is the (layer, component) cell
        and the attr ``expert`` names it.

    Raises
    ------
    ToolkitError
        The checkpoint has no matrix at (layer, component); as :func:`weight_stats` otherwise.
    """
    from toolkit.collect.executors import SerialExecutor
    from toolkit.collect.plan import PlannedTensor
    from toolkit.errors import ToolkitError

    fit = FitOptions.coerce(fit, "toolkit.plot.esd")
    measurement = WeightMeasurement.make(list(metrics), device, spectra=True, fit=fit)
    with cache_run(), executor_for(None, device):
        plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping, cache=cache)
        measurement = measurement_for(plan, measurement)
        want = (layer, component) if expert is None else (layer, component, expert)
        found = [PlannedTensor(t.record, tuple(p for p in t.pieces if p.key == want)) for t in plan.tensors]
        found = [t for t in found if t.pieces]
        if not found:
            routed = any(p.key[:2] == (layer, component) and p.expert is not None for t in plan.tensors
                         for p in t.pieces)
            raise ToolkitError(f"{plan.source.location!r} has no matrix at layer {layer} {component!r}"
                               + (f" expert {expert}" if expert is not None else "")
                               + (" (routed experts there: pass expert=0, 1...)" if routed and expert is None else "")
                               + f" (layers 0..{plan.num_layers - 1}; components: "
                               f"{sorted({p.component for t in plan.tensors for p in t.pieces})})")
        store = open_cache(plan.value_identity, measurement.kind, enabled=cache)
        results = run_units(measurement, found, store, SerialExecutor(), lambda name: None, [plan.source])
    cells, attrs = results[0], plan.attrs()
    if expert is not None:  # the expert's matrix, with its spectrum, in the (layer, component) cell
        cells, attrs = {key[:2]: cell for key, cell in cells.items()}, {**attrs, "expert": int(expert)}
    ds = build_grid_dataset(plan.num_layers, cells, list(measurement.chosen), attrs, spectra=True)
    return with_fit_options(ds, fit, measurement.chosen)
