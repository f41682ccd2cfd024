"""``weight_stats``: the toolkit's main job, checkpoint -> (layer, component) Dataset."""

from __future__ import annotations

from collections.abc import Callable

import xarray as xr

from toolkit.collect.cache import cache_run, open_cache
from toolkit.collect.executors import executor_for
from toolkit.collect.grid import build_grid_dataset
from toolkit.collect.pipeline import run_units
from toolkit.collect.plan import plan_pieces
from toolkit.collect.progress import make_progress
from toolkit.collect.weight_cells import WeightMeasurement


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
        Reuse and store the plan (:mod:`toolkit.collect.plan_cache`) and the
        per-matrix results in the on-disk cache (:mod:`toolkit.collect.cache`;
        ``$TOOLKIT_CACHE_DIR``), so a re-run is near-instant and an interrupted
        run computes only what is missing.
    client : distributed.Client or str, optional
        Run on a Dask cluster (a client or a scheduler address such as
        ``"tcp://host:8786"``): one task per stored tensor, read by the
        workers themselves; the same Dataset (:mod:`toolkit.collect.executors`).

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
    measurement = WeightMeasurement.make(metrics, device)
    with cache_run(), executor_for(client, device) as executor:
        plan = plan_pieces(source, gguf_file=gguf_file, revision=revision, mapping=mapping, cache=cache)
        store = open_cache(plan.value_identity, measurement.kind, enabled=cache)
        report = make_progress(progress, total=len(plan.tensors), desc="weights")
        try:
            results = run_units(measurement, plan.tensors, store, executor, report.step, [plan.source])
        finally:
            report.close()
    cells = {key: cell for got in results for key, cell in got.items()}
    return build_grid_dataset(plan.num_layers, cells, list(measurement.chosen), plan.attrs())
