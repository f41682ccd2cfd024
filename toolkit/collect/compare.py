"""``compare`` and ``compare_series``: how fine-tuning changed each weight matrix.

Both sides are streamed tensor by tensor (peak memory near two tensors, never
two models), matched by parameter name, split into canonical components and
measured with the registered diff metrics (:mod:`toolkit.metrics.diff`).
Per-cell results go to the on-disk cache (kind ``"compare"``, keyed by both
sides' fingerprints), so a re-run is near-instant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from toolkit import options
from toolkit.collect.assemble.pairs import pair_dataset, series_name
from toolkit.collect.cache import digest
from toolkit.collect.execute import open_pass
from toolkit.collect.measure import PairMeasurement
from toolkit.collect.pass_options import ADDRESS, DIFF, PASS, SELECTION, metrics_of
from toolkit.collect.plan import plan_pieces
from toolkit.collect.plan.adapters import adapter_base, merge_adapters
from toolkit.collect.plan.pairs import pair_tensors, select_pairs
from toolkit.collect.plan.selection import Selection
from toolkit.constraint_types import SOURCE, Exempt
from toolkit.constraints import Check, OneOf, checks_options
from toolkit.errors import InvalidOptionError
from toolkit.sources import SourceRequest

REFERENCES = ("first", "previous")

def _checkpoint_list(checkpoints, where: str) -> list:
    """``checkpoints`` of :func:`compare_series` as a list: an iterable of checkpoints, not one."""
    if isinstance(checkpoints, (str, bytes, os.PathLike, SourceRequest)) or not isinstance(checkpoints, Iterable) \
            or hasattr(checkpoints, "tensors"):
        raise InvalidOptionError("checkpoints", checkpoints, "a list of checkpoints in training order, e.g. "
                                 "compare_series([base, step_10, step_20]); for two checkpoints toolkit.compare("
                                 "base, target) does the same", where)
    checkpoints = list(checkpoints)
    if not checkpoints:
        raise InvalidOptionError("checkpoints", checkpoints, "a non-empty list of checkpoints in training order",
                                 where)
    return checkpoints


@checks_options(base=SOURCE, target=Exempt("the second checkpoint, as base; None: base's own stored update "
                                          "(NotAnUpdateError where it has none)"),
                **metrics_of("diff"), **DIFF, **PASS, **SELECTION, **ADDRESS)
def compare(base, target=None, metrics=None, *, tolerance: float = 0.0, k: int = 16, mapping=None,
            device: str = "cpu", progress: bool | Callable = True, cache: bool = True, client=None,
            keep_spectra: bool = False, layers=None, components=None, experts=None,
            fill: bool = False, gguf_file: str | None = None, revision: str | None = None,
            download: bool = False) -> xr.Dataset:
    r"""How ``target`` differs from ``base``, per layer and component.

    Parameters
    ----------
    base, target : str, path-like, toolkit.sources.Source or toolkit.sources.SourceRequest
        Anything :func:`toolkit.open_source` accepts: hub id, local folder,
        ``.gguf`` file, an opened source, or a ``SourceRequest`` (an address
        with its own ``gguf_file`` / ``revision`` / ``download``: two
        revisions of one repo are ``compare(SourceRequest(repo, revision="a"),
        SourceRequest(repo, revision="b"))``). ``None`` is the embedded SmolLM2-135M GGUF. The two
        may differ in format and storage dtype (a dequantised GGUF base
        against a bf16 safetensors fine-tune is a normal case; a quantised
        release against its original gives the quantisation error). A PEFT
        LoRA adapter folder as ``target`` is compared as base + ΔW (DoRA
        rescaled), each base tensor read once; ``compare(adapter)`` alone
        (``target`` omitted) opens the base the adapter records
        (``base_model_name_or_path``, a local folder or the hub cache).
    metrics : list of str, optional
        Registered diff metrics (``toolkit.list_metrics("diff")``); None: all.
    tolerance : float, default 0.0
        Entries with :math:`|t - b| \le` ``tolerance`` count as unchanged
        (``update_sparsity``, ``update_density``); 0 compares stored bits.
    k : int, default 16
        Subspace dimension of ``subspace_overlap`` (clipped to min(out, in)).
    mapping : toolkit.Mapping, optional
        Parameter-name -> component mapping for an unknown family (both sides).
    device : str
        Device for the factorisations (``"cpu"`` or ``"cuda"``).
    progress : bool or callable
        A tqdm bar over tensors, or ``progress(done, total, name)``.
    cache : bool
        Reuse and store per-cell results in the on-disk cache.
    client : distributed.Client or str, optional
        Run on a Dask cluster (a client or a scheduler address such as
        ``"tcp://host:8786"``): one task per stored tensor pair, read by the
        workers themselves; the same Dataset (:mod:`toolkit.collect.execute.executors`).
    gguf_file, revision, download
        As :func:`toolkit.weight_stats`, for each side that is not a
        ``SourceRequest`` saying otherwise (``download``: download hub repos
        that are not in the local cache instead of reading their safetensors
        weights in place over HTTP).
    keep_spectra : bool, default False
        Add the spectrum of each cell's update as ``eigenvalues`` (layer,
        component, index): the eigenvalues of ΔWᵀΔW, ΔW = W_target − W_base,
        descending, NaN-padded (attr ``matrix = "update W_target - W_base"``);
        kept with the cell in the cache, drawn by ``toolkit.plot.esd``.
    layers, components, experts, fill
        Only part of the model, as in :func:`toolkit.weight_stats` (only the
        selected cells' tensor pairs are read). With a selection the whole-model
        totals ``model_relative_change`` / ``model_update_sparsity`` are left
        out (they need every tensor) and ``tensor`` lists the pairs read.

    Returns
    -------
    xarray.Dataset
        Dims ``(layer, component)``: one float64 variable per diff metric
        (``relative_change``, ``update_sparsity``, ``update_density``,
        ``delta_stable_rank``, ``delta_effective_rank``,
        ``cosine_similarity``, ``subspace_overlap``) with attrs
        ``long_name``, ``units``, ``description``, ``reference``; coords
        ``parameter_name``, ``n_rows``, ``n_cols``, ``nan_reason``. Dim
        ``tensor`` (every compared stored tensor, embeddings and norms
        included, tied embeddings once): ``tensor_relative_change``,
        ``tensor_update_sparsity``, coord ``tensor_size`` (entries). Scalars
        ``model_relative_change`` and ``model_update_sparsity`` over all of
        them. Attrs ``base_*`` and ``target_*`` (source, format, revision,
        fingerprint, storage_dtype), ``model_type``, ``num_hidden_layers``,
        ``tolerance``, ``subspace_k``, ``skipped_tensors``.

    Raises
    ------
    CheckpointMismatchError
        Different architectures, layer counts or shapes: names the first
        mismatching tensor and what each side has.
    AdapterBaseError
        ``compare(adapter)`` whose base is not on this machine (the message
        says how to pass it), or ``target`` omitted for a non-adapter.
    UnknownMetricError
        A name in ``metrics`` is not a registered diff metric.
    InvalidOptionError
        ``tolerance`` negative or not finite, ``k`` not a whole number >= 1, a
        flag that is not a bool... (before any work).
    (and whatever :func:`toolkit.open_source` raises for a missing source)

    Notes
    -----
    "Unchanged" is judged on the stored values, bit for bit in the coarser
    storage dtype of the two sides; see :mod:`toolkit.metrics.diff`.

    References
    ----------
    Mukherjee, S. et al. (2025). Reinforcement Learning Finetunes Small
    Subnetworks in Large Language Models. arXiv:2505.11711.

    Examples
    --------
    >>> ds = toolkit.compare("Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-1.5B-Instruct")  # doctest: +SKIP
    >>> toolkit.plot.heatmap(ds, "relative_change")                               # doctest: +SKIP
    """
    address = {"gguf_file": gguf_file, "revision": revision, "download": download, "where": "toolkit.compare"}
    if target is None:  # compare(adapter): the adapter against the base it records
        base, target = adapter_base(base.source if isinstance(base, SourceRequest) else base), base
    sides = [SourceRequest.of(c, **address) for c in (base, target)]
    selection = Selection.of(layers, components, experts)
    measurement = PairMeasurement.make(metrics, tolerance, k, device, spectra=keep_spectra)
    return _run(sides, [(0, 1)], measurement, selection, fill=fill, mapping=mapping, progress=progress,
                cache=cache, client=client)[1][0]


@checks_options(checkpoints=Check(_checkpoint_list, "runs/step-10"), steps=Check(options.training_steps, [1, 1]),
                reference=OneOf(REFERENCES), **metrics_of("diff"), **DIFF, **PASS, **SELECTION, **ADDRESS)
def compare_series(checkpoints: Sequence, steps: Sequence[int] | None = None, *, reference: str = "first",
                   metrics=None, tolerance: float = 0.0, k: int = 16, mapping=None, device: str = "cpu",
                   progress: bool | Callable = True, cache: bool = True, client=None,
                   keep_spectra: bool = False, layers=None, components=None, experts=None,
                   fill: bool = False, gguf_file: str | None = None, revision: str | None = None,
                   download: bool = False) -> xr.Dataset:
    """Diffs along a training run's checkpoints.

    Parameters
    ----------
    checkpoints : sequence of str, path-like, Source or SourceRequest
        The run's checkpoints in training order (at least one).
    steps : sequence of int, optional
        Training step of each checkpoint. Default: the number that ends each
        checkpoint's folder name (``step-00040``, ``checkpoint-500``) when
        all have one, else 0, 1, 2, ...
    reference : {"first", "previous"}
        Diff each checkpoint against the first one (cumulative change) or
        against the one before it (change per interval). Row 0 is the first
        checkpoint against itself (no change) either way.
    metrics, tolerance, k, mapping, device, progress, cache, client, keep_spectra, layers, components, experts, fill, \
gguf_file, revision, download
        As in :func:`compare` (``eigenvalues`` gets the ``checkpoint`` dim; row 0,
        a checkpoint against itself, is all zeros).

    Returns
    -------
    xarray.Dataset
        Dims ``(checkpoint, layer, component)`` for the diff metrics,
        ``(checkpoint, tensor)`` and ``(checkpoint,)`` for the tensor and
        model totals; coords ``checkpoint`` (0..n-1), ``step`` and
        ``reference_step`` (the step each row is diffed against); attrs as
        :func:`compare` with the first checkpoint as base (no ``target_*``),
        plus ``reference``, ``checkpoint_sources`` and
        ``checkpoint_fingerprints`` (lists, one per checkpoint).

    Raises
    ------
    CheckpointMismatchError
        A checkpoint that does not match its reference (before any work).
    InvalidOptionError
        ``reference`` not in ``{"first", "previous"}``, ``checkpoints`` not a
        non-empty list, ``steps`` not increasing whole numbers >= 0 or not one
        per checkpoint, or an option :func:`compare` refuses.

    Examples
    --------
    >>> run = toolkit.finetune.finetune("runs/smollm2", preset="short")   # doctest: +SKIP
    >>> ds = toolkit.compare_series(run.checkpoints, steps=run.steps)    # doctest: +SKIP
    >>> ds.relative_change.sel(step=4)                                   # doctest: +SKIP
    """
    address = {"gguf_file": gguf_file, "revision": revision, "download": download, "where": "toolkit.compare_series"}
    steps = steps if steps is not None else infer_steps(checkpoints)
    if len(steps) != len(checkpoints):
        raise InvalidOptionError("steps", steps, f"one training step per checkpoint: {len(steps)} steps for "
                                 f"{len(checkpoints)} checkpoints", "toolkit.compare_series")
    pairs = [(0, 0)] + [(0 if reference == "first" else i - 1, i) for i in range(1, len(checkpoints))]
    selection = Selection.of(layers, components, experts)
    measurement = PairMeasurement.make(metrics, tolerance, k, device, spectra=keep_spectra)
    plans, rows = _run([SourceRequest.of(c, **address) for c in checkpoints], pairs, measurement, selection,
                       fill=fill, mapping=mapping, progress=progress, cache=cache, client=client,
                       where="toolkit.compare_series")
    ds = xr.concat(rows, dim="checkpoint", data_vars="all", coords="different", compat="equals",
                   join="outer", combine_attrs="override")
    ds = ds.assign_coords(
        checkpoint=("checkpoint", np.arange(len(plans))),
        step=("checkpoint", np.asarray(steps, dtype=np.int64), {"long_name": "training step"}),
        reference_step=("checkpoint", np.asarray([steps[b] for b, _ in pairs], dtype=np.int64),
                        {"long_name": "training step of the checkpoint diffed against"}),
    )
    ds.attrs = {k: v for k, v in ds.attrs.items() if not k.startswith("target_")}
    ds.attrs.update(comparison=f"each checkpoint vs the {reference} one", reference=reference,
                    checkpoint_sources=[p.source.location for p in plans],
                    checkpoint_fingerprints=[p.source.fingerprint for p in plans],
                    model_name=series_name([p.source.location for p in plans]))
    return ds


def infer_steps(checkpoints: Sequence) -> list[int]:
    """Steps from the trailing number of each checkpoint's name, else ``0..n-1``."""
    found = []
    for c in checkpoints:
        c = c.source if isinstance(c, SourceRequest) else c
        loc = getattr(c, "location", c)
        m = re.search(r"(\d+)$", Path(os.fspath(loc)).name) if isinstance(loc, (str, os.PathLike)) else None
        found.append(int(m.group(1)) if m else None)
    if None in found or len(set(found)) != len(found):
        return list(range(len(checkpoints)))
    return found


def _run(checkpoints: list[SourceRequest], pairs, measurement: PairMeasurement, selection: Selection, *,
         fill: bool, mapping, progress, cache: bool, client=None, where: str = "toolkit.compare"):
    """``(plans, datasets)``: the plan of each checkpoint, and one Dataset per ``(base index,
    target index)`` pair of them.

    Each pair of checkpoints is one :func:`~toolkit.collect.execute.run_pass` (one unit per
    stored tensor pair, ``measurement`` at the pair's indices) on the executor ``client``
    chooses; every mismatch is raised before any work. Only the pairs holding a cell of
    ``selection`` are read.
    """
    with open_pass(progress=progress, desc="compare", what="the checkpoints", client=client,
                   device=measurement.device, cache=cache, where=where) as run:
        plans = []
        for i, c in enumerate(checkpoints):
            run.progress.status(f"opening checkpoint {i + 1} of {len(checkpoints)} \u2026")
            plans.append(plan_pieces(c, mapping=mapping, cache=cache))
        plans = merge_adapters(plans, pairs, client)
        matched = [pair_tensors(plans[b], plans[t]) for b, t in pairs]  # every mismatch before any work
        chosen = [plans[b].select(selection) for b, _ in pairs]
        matched = [(select_pairs(tps, plan.selected), skipped) for (tps, skipped), plan in zip(matched, chosen,
                                                                                                 strict=True)]
        run.progress.begin(sum(len(p) for p, _ in matched))
        out = []
        for j, ((bi, ti), (tensor_pairs, skipped)) in enumerate(zip(pairs, matched, strict=True)):
            m = measurement.at(bi, ti)
            got = run.run(m, tensor_pairs, identity=digest(plans[bi].value_identity, plans[ti].value_identity),
                          sources=[plans[bi].source, plans[ti].source])
            run.executor.forget({b for b, _ in pairs[j + 1:]})
            rows = [(tp.name, totals) for tp, (totals, _) in zip(tensor_pairs, got, strict=True)]
            cells = {key: cell for _, c in got for key, cell in c.items()}
            out.append(pair_dataset(chosen[j], plans[ti], cells, rows, list(m.chosen), skipped, m.tolerance, m.k,
                                    spectra=m.spectra, fill=fill))
    return plans, out
