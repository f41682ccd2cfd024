"""``weight_stats``: the toolkit's main job, checkpoint -> (layer, component) Dataset."""

from __future__ import annotations

from collections.abc import Callable

import xarray as xr

from toolkit.collect.cache import metric_key, open_cache
from toolkit.collect.evaluate import evaluate_matrix
from toolkit.collect.grid import Cell, build_grid_dataset, cell_from, cell_results
from toolkit.collect.plan import plan_pieces
from toolkit.collect.progress import make_progress
from toolkit.collect.stream import map_tensors
from toolkit.metrics.registry import resolve_metrics
from toolkit.metrics.spectral import check_device


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
        Reuse and store per-matrix results in the on-disk cache
        (:mod:`toolkit.collect.cache`; ``$TOOLKIT_CACHE_DIR``), so a re-run is
        near-instant and an interrupted run computes only what is missing.
    client : distributed.Client or str, optional
        Run on a Dask cluster (a client or a scheduler address such as
        ``"tcp://host:8786"``): one task per stored tensor, read by the
        workers themselves; the same Dataset (:mod:`toolkit.collect.distributed`).

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
    if client is not None:
        from toolkit.collect import distributed as _distributed

        check_device(device, available=False)  # the workers may have GPUs this process lacks
        return _distributed.weight_stats(source, metrics, gguf_file=gguf_file, revision=revision, mapping=mapping,
                                         device=device, progress=progress, cache=cache, client=client)
    check_device(device)
    chosen = resolve_metrics(metrics, kind="weight")
    plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping)
    store = open_cache(plan.source.fingerprint, "weights", enabled=cache)
    keys = {m.name: metric_key(m, **dict(m.options)) for m in chosen}
    cells: dict[tuple[int, str], Cell] = {}
    # Look every cell up in the cache first: only tensors with work left are read.
    jobs = []
    for record, pieces in plan.records:
        entries = []
        for piece in pieces:
            cell_id = f"{record.name}|{record.dtype}|{record.shape}|{piece.layer}|{piece.component}"
            cached, shape = store.get(cell_id)
            entries.append((piece, cell_id, cached, shape, [m for m in chosen if keys[m.name] not in cached]))
        jobs.append((record, entries))
    todo = [j for j, (_, entries) in enumerate(jobs) if any(e[4] for e in entries)]

    def measure(i: int, tensor) -> list:
        """The fresh Cells of job todo[i] (runs in a pipeline thread; stores nothing)."""
        return [evaluate_matrix(piece.extract(tensor), need, device=device, parameter_name=piece.parameter_name)
                if need else None for piece, _, _, _, need in jobs[todo[i]][1]]

    def finish(j: int, fresh: list | None) -> None:
        """Store job j's fresh results and fill its cells (main thread only)."""
        for k, (piece, cell_id, cached, shape, need) in enumerate(jobs[j][1]):
            if need:
                got = fresh[k]
                shape = got.shape
                new, keep = cell_results(got, need, keys)
                store.put(cell_id, keep, got.shape)
                cached = {**cached, **new}
            cells[(piece.layer, piece.component)] = cell_from(piece, shape, cached, chosen, keys)

    report = make_progress(progress, total=len(plan.records), desc="weights")
    done = 0
    try:
        pending = set(todo)
        for j, (record, _) in enumerate(jobs):
            if j not in pending:
                finish(j, None)
                done += 1
                report(done, record.name)
        # Tensors are read, converted and measured on parallel pipelines
        # (toolkit.collect.stream); results are stored here, in this thread,
        # so an interrupted run keeps exactly the results it reported.
        # Metrics that accept the storage dtype (the entry-wise ones) are fed it
        # as read: their one chunked pass converts as it goes.
        float32 = not all(m.any_dtype for m in chosen)
        for i, fresh in map_tensors([jobs[j][0].read for j in todo], measure, float32=float32):
            finish(todo[i], fresh)
            done += 1
            report(done, jobs[todo[i]][0].name)
    finally:
        report.close()
    return build_grid_dataset(plan.num_layers, cells, chosen, plan.attrs())
