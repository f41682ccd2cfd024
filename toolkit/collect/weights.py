"""``weight_stats`` and ``cell_spectrum``: a checkpoint -> its (layer, component) Dataset.

The front door of one checkpoint: options checked, then plan
(:mod:`toolkit.collect.plan`) -> measure (:mod:`toolkit.collect.measure`)
-> execute (:mod:`toolkit.collect.execute`) -> assemble
(:mod:`toolkit.collect.assemble`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import xarray as xr

from toolkit.collect.assemble.grid import build_grid_dataset, with_unselected
from toolkit.collect.assemble.heads import with_heads
from toolkit.collect.assemble.quality import quality_bounds, with_fit_options, with_quality
from toolkit.collect.assemble.served import with_precision_served
from toolkit.collect.execute import open_pass
from toolkit.collect.measure import WeightMeasurement, measurement_for
from toolkit.collect.pass_options import ADDRESS, PASS, SELECTION, WEIGHTS, metrics_of
from toolkit.collect.plan import plan_pieces
from toolkit.collect.plan.selection import Selection
from toolkit.constraint_types import SOURCE
from toolkit.constraints import Function, Optional, Text, Whole, checks_options
from toolkit.errors import SelectionError
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.spectral import CERTIFIED
from toolkit.sources import SourceRequest


@checks_options(source=SOURCE, **metrics_of("weight"), **ADDRESS, **PASS, **WEIGHTS, **SELECTION,
                on_cells=Optional(Function("on_cells(partial)")))
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
    layers=None,
    components=None,
    experts=None,
    fill: bool = False,
    download: bool = False,
    on_cells: Callable[[Callable[[], xr.Dataset]], None] | None = None,
) -> xr.Dataset:
    """Statistics of every weight matrix of a checkpoint, per layer and component.

    Tensors are streamed from the file (the model is never instantiated),
    dequantised to float32, split into canonical components and measured;
    reading overlaps with measuring, on up to two pipelines that share
    torch's thread budget (:mod:`toolkit.collect.execute.stream`), so peak memory
    stays within a few times the largest tensor.

    Parameters
    ----------
    source : str, path-like, toolkit.sources.Source, toolkit.sources.SourceRequest or None
        Hub id (``"Qwen/Qwen2.5-7B"``), local directory (safetensors, sharded
        safetensors, ``pytorch_model.bin``), or ``.gguf`` file. None: the
        embedded default model, SmolLM2-135M-Instruct (GGUF Q4_1, 30 layers).
        A ``SourceRequest`` carries the address with ``gguf_file``,
        ``revision`` and ``download`` as one record.
    metrics : list of str, optional
        Registered weight metric names; None computes every registered one
        (``toolkit.list_metrics()``).
    gguf_file : str, optional
        File name inside ``source`` when it is a directory or hub repo of GGUF files.
    revision : str, optional
        Hub revision (branch, tag or commit).
    mapping : toolkit.Mapping, optional
        Custom parameter-name -> component mapping for an unknown family.
    download : bool, default False
        Download a hub repo that is not in the local cache (``snapshot_download``)
        instead of reading its safetensors weights in place over HTTP, where
        only the selected tensors' bytes move (:mod:`toolkit.sources.remote`).
    device : str
        Device for the spectral work (``"cpu"`` or ``"cuda"``).
    progress : bool or callable
        True: a tqdm bar over tensors; a callable ``progress(done, total, name)``
        is called after each tensor (used by the notebook widget).
    cache : bool
        Reuse and store the plan (:mod:`toolkit.collect.plan.cache`) and the
        per-matrix results in the on-disk cache (:mod:`toolkit.collect.cache`;
        ``$TOOLKIT_CACHE_DIR``), so a re-run is near-instant and an interrupted
        run computes only what is missing.
    client : distributed.Client or str, optional
        Run on a Dask cluster (a client or a scheduler address such as
        ``"tcp://host:8786"``): one task per stored tensor, read by the
        workers themselves; the same Dataset (:mod:`toolkit.collect.execute.executors`).
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
    precision : {"float64", "float32", "float32-certified"}, default "float64"
        Of the singular values (:func:`toolkit.metrics.singular_values`).
        ``"float32"`` forms the Gram matrix in float32 (its eigensolve stays
        float64): faster on large matrices (figures: ``benchmarks/README.md``), and agrees with
        float64 on the spectral norm, stable and effective rank and the
        power-law fit (measured: ``docs/scaling.md``); the condition number,
        matrix rank, rank loss and spectral entropy, which read the smallest
        singular values, are NaN with the reason where float32 cannot resolve
        them. ``"float32-certified"``: the float32 Gram matrix diagonalised
        in float64, with a per-cell certificate that every spectral metric is
        within its tolerance of the float64 value (alpha 1e-3 absolute, norms
        and ranks 1e-5 relative: :mod:`toolkit.metrics.certificate`); a cell
        that fails it is recomputed in float64, and the string variable
        ``precision_served`` (layer, component) says which served each cell
        (per-head statistics are certified the same way, per head, without
        a record of which precision served them).
        Recorded as the attr ``spectral_precision``; results of the
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
        (layer, component, kv_head) for ``attn.k`` / ``attn.v``, measured in
        the same pass (each attention tensor read once, on the cluster with
        ``client``) and cached with the cell.
    layers : int, slice, range or list of int, optional
        Only these layers, as Python indexes the list of the model's layers
        (``slice(0, 28, 4)``: every 4th; ``-1``: the last). Default all.
    components : str or list of str, optional
        Only these components, named as in the Dataset (``"attn.q"``,
        ``"mlp.router"``) or by pattern (``"attn.*"``; ``"attn"`` / ``"mlp"``
        alone: the group). Default all.
    experts : int, slice, range or list of int, optional
        Only these routed experts of the MoE layers (other components are
        kept). Default all. Only the selected cells' tensors are read; a
        later, wider selection finds them in the cache
        (:mod:`toolkit.collect.plan.selection`).
    fill : bool, default False
        With a selection: the whole model's grid, the cells left out NaN with
        ``nan_reason`` "not selected (...)"; by default they are absent.
    on_cells : callable, optional
        ``on_cells(partial)`` after each stored tensor, in the calling thread
        (the live view of :func:`toolkit.widgets.explore_model`):
        ``partial()`` assembles the Dataset of every cell finished so far, laid
        out as the result (the cells still to come NaN, without a tensor
        name). An exception it raises stops the pass; the finished cells are
        in the cache, so a later call resumes from them.

    Returns
    -------
    xarray.Dataset
        Dims ``(layer, component)``; one float64 variable per metric with
        attrs ``long_name``, ``units``, ``description``, ``reference``; coords
        ``parameter_name``, ``n_rows``, ``n_cols``, ``nan_reason``; attrs
        describing the source (``source``, ``format``, ``model_type``,
        ``num_hidden_layers``, ``storage_dtype``, ``fingerprint``,
        ``revision``, ``toolkit_version``, ``created``; ``selection`` when
        part of the model was selected). Components the architecture lacks
        are NaN.

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
    SelectionError
        ``layers``, ``components`` or ``experts`` naming something the model
        does not have (the message lists what it has).
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
    request = SourceRequest.of(source, gguf_file=gguf_file, revision=revision, download=download,
                               where="toolkit.weight_stats")
    bounds = quality_bounds(quality_thresholds)
    fit = FitOptions.coerce(fit)
    selection = Selection.of(layers, components, experts)
    measurement = WeightMeasurement.make(metrics, device, spectra=keep_spectra, fit=fit, precision=precision)
    with open_pass(progress=progress, desc="weights", client=client, device=device, cache=cache,
                   where="toolkit.weight_stats") as run:
        plan = plan_pieces(request, mapping=mapping, cache=cache)
        plan = plan.select(selection)
        measurement = measurement_for(plan.source, measurement)  # measured from its factors (a LoRA adapter)
        if per_head:
            measurement = measurement.with_heads(plan.source.config, plan.source.location)
        run.progress.begin(len(plan.tensors))

        def assemble(cells: dict) -> xr.Dataset:
            attrs = {**plan.attrs(), "spectral_precision": precision}
            ds = build_grid_dataset(plan.num_layers, cells, list(measurement.chosen), attrs, spectra=keep_spectra,
                                    **plan.grid(fill))
            ds = with_unselected(with_fit_options(ds, fit, measurement.chosen), plan.selected)
            if measurement.heads is not None:
                ds = with_heads(ds, cells, measurement.heads)
            if precision == CERTIFIED:
                ds = with_precision_served(ds, cells)
            return with_quality(ds, bounds)

        found: dict = {}

        def finished(got: dict) -> None:
            found.update(got)
            on_cells(lambda: assemble(dict(found)))

        units = live_order(plan.tensors) if on_cells is not None else plan.tensors  # cells shown as they come
        results = run.run(measurement, units, identity=plan.value_identity, sources=[plan.source],
                          on_cells=finished if on_cells is not None else None)
    return assemble({key: cell for got in results for key, cell in got.items()})


def live_order(tensors) -> list:
    """The order of a pass whose cells are shown as they come (``on_cells``): smallest matrices first, then by
    layer as a number. File order puts ``layers.10`` .. ``layers.19`` before ``layers.2``, and a heatmap
    filled in that order looked random; stable, so equal sizes and layers keep file order."""
    def key(t):
        layers = [int(p.layer) for p in t.pieces if p.layer is not None]
        return math.prod(int(d) for d in t.record.shape) // max(len(t.pieces), 1), min(layers, default=-1)

    return sorted(tensors, key=key)


@checks_options(source=SOURCE, layer=Whole(meaning="a layer index, -1 the last"),
                component=Text("a component name, e.g. 'attn.q'"),
                **metrics_of("weight"), **ADDRESS, mapping=PASS["mapping"], device=PASS["device"],
                cache=PASS["cache"], expert=Optional(Whole(minimum=0, meaning="a routed expert's index")),
                fit=WEIGHTS["fit"])
def cell_spectrum(source=None, *, layer: int, component: str,
                  metrics=("alpha", "alpha_xmin", "alpha_ci_xmin_lower", "alpha_ci_xmin_upper"),
                  gguf_file: str | None = None, revision: str | None = None, mapping=None, device: str = "cpu",
                  cache: bool = True, expert: int | None = None, fit=None, download: bool = False) -> xr.Dataset:
    """The Dataset of one cell with its spectrum, computing only that matrix.

    The same pipeline and cache as :func:`weight_stats` (``keep_spectra=True``),
    for one (layer, component): a later ``weight_stats`` finds the cell cached,
    and a cell already cached with its spectrum is not read again.

    Parameters
    ----------
    source, gguf_file, revision, mapping, device, cache, fit, download
        As :func:`weight_stats`.
    layer : int
    component : str
    metrics : sequence of str
        Weight metrics to compute with it (default: the power-law fit and alpha's 95 % interval, which the
        explorer's drill-down shows).
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
    SelectionError
        The checkpoint has no matrix at (layer, component) (the message lists what it has), or
        ``expert`` missing where the cell holds routed experts; as :func:`weight_stats` otherwise.
    """
    request = SourceRequest.of(source, gguf_file=gguf_file, revision=revision, download=download,
                               where="toolkit.cell_spectrum")
    fit = FitOptions.coerce(fit)
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    measurement = WeightMeasurement.make(metrics, device, spectra=True, fit=fit)
    selection = Selection.of(layer, component, expert, "toolkit.cell_spectrum")
    with open_pass(progress=False, desc="spectrum", device=device, cache=cache, where="toolkit.cell_spectrum") as run:
        plan = plan_pieces(request, mapping=mapping, cache=cache)
        plan = plan.select(selection)
        if (expert is None) != (plan.num_experts == 0):
            raise SelectionError("expert", expert, f"layer {layer} {component!r} holds {plan.num_experts} routed "
                                 "experts: pass expert=0, 1..." if expert is None else
                                 f"layer {layer} {component!r} is not a routed expert's matrix: leave expert out")
        measurement = measurement_for(plan.source, measurement)
        results = run.run(measurement, plan.tensors, identity=plan.value_identity, sources=[plan.source])
    cells = {key: cell for got in results for key, cell in got.items()}
    attrs = plan.attrs()
    if expert is not None:  # the expert's matrix, with its spectrum, in the (layer, component) cell
        cells, attrs = {key[:2]: cell for key, cell in cells.items()}, {**attrs, "expert": int(expert)}
    ds = build_grid_dataset(plan.num_layers, cells, list(measurement.chosen), attrs, spectra=True,
                            **plan.grid(fill=True))
    return with_quality(with_fit_options(ds, fit, measurement.chosen))
