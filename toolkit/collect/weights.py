"""``weight_stats``: the toolkit's main job, checkpoint -> (layer, component) Dataset."""

from __future__ import annotations

from collections.abc import Callable

import xarray as xr

from toolkit.collect.cache import metric_key, open_cache
from toolkit.collect.evaluate import evaluate_matrix
from toolkit.collect.grid import Cell, build_grid_dataset
from toolkit.collect.plan import plan_pieces
from toolkit.collect.progress import make_progress
from toolkit.metrics.registry import resolve_metrics


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
) -> xr.Dataset:
    """Statistics of every weight matrix of a checkpoint, per layer and component.

    Tensors are streamed one at a time from the file (the model is never
    instantiated), dequantised to float32, split into canonical components
    and measured; peak memory stays near the largest tensor.

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
        Reuse and store per-matrix results in the on-disk cache
        (:mod:`toolkit.collect.cache`; ``$TOOLKIT_CACHE_DIR``), so a re-run is
        near-instant and an interrupted run computes only what is missing.

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

    Examples
    --------
    >>> ds = toolkit.weight_stats()                      # doctest: +SKIP
    >>> toolkit.plot.heatmap(ds, "stable_rank")          # doctest: +SKIP
    """
    chosen = resolve_metrics(metrics, kind="weight")
    plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping)
    store = open_cache(plan.source.fingerprint, "weights", enabled=cache)
    keys = {m.name: metric_key(m, **dict(m.options)) for m in chosen}
    cells: dict[tuple[int, str], Cell] = {}
    report = make_progress(progress, total=len(plan.records), desc="weights")
    try:
        for done, (record, pieces) in enumerate(plan.records, start=1):
            tensor = None
            for piece in pieces:
                cell_id = f"{record.name}|{record.dtype}|{record.shape}|{piece.layer}|{piece.component}"
                cached, shape = store.get(cell_id)
                todo = [m for m in chosen if keys[m.name] not in cached]
                cell = Cell(piece.parameter_name, shape or (0, 0))
                if todo:
                    if tensor is None:
                        tensor = record.read()
                    fresh = evaluate_matrix(piece.extract(tensor), todo, device=device, parameter_name=piece.parameter_name)
                    cell.shape = fresh.shape
                    new = {keys[m.name]: (fresh.values[m.name], fresh.reasons.get(m.name, "")) for m in todo}
                    store.put(cell_id, new, fresh.shape)
                    cached = {**cached, **new}
                for m in chosen:
                    value, reason = cached[keys[m.name]]
                    cell.values[m.name] = value
                    if reason:
                        cell.reasons[m.name] = reason
                cells[(piece.layer, piece.component)] = cell
            del tensor
            report(done, record.name)
    finally:
        report.close()
    return build_grid_dataset(plan.num_layers, cells, chosen, plan.attrs())
