"""What a live pass measures, read from the checkpoint's plan before it starts: the first look of a large
model, each tensor's cost for the clock, whether spectra are computed, and which cells a Dataset holds (the
view only ever shows more). Pure functions of the plan and the options; no thread here
(:mod:`toolkit.widgets.live_pass` runs the pass).
"""

from __future__ import annotations

import math
import os

import numpy as np

from toolkit.widgets.live_clock import cost_of

#: A model whose largest matrix has more entries than this gets a first look: its smallest matrices
#: measured before the rest (SmolLM2's largest has 0.9 M; a 7B model's 68 M).
FIRST_LOOK_ENTRIES = 4_000_000
#: Options a plan takes besides the address (SourceRequest's; the others are the pass's).
PLAN_OPTIONS = ("mapping", "cache")
SELECTION_KEYS = ("layers", "components", "experts")


def first_look(plan, stats_kws: dict, *, count: int = 2) -> list | None:
    """The ``count`` smallest components of a large model (measured in every layer before the rest), when
    no selection was asked for; else None.

    A pass reads its tensors in file order, where a 7B model's first layer starts with its largest
    matrices (``mlp.down_proj``: 40 s to the first cell on 2 cores). Measuring the smallest kinds first
    (``attn.k`` and ``attn.v``, a fraction of a second each) fills two columns of the heatmap in seconds;
    the pass that follows finds them in the cache. Only the plan is read here (the stored tensors'
    shapes), no tensor.
    """
    if plan is None or any(stats_kws.get(k) is not None for k in SELECTION_KEYS) or not stats_kws.get("cache", True):
        return None
    sizes = [(math.prod(t.record.shape) // len(t.pieces), p) for t in plan.tensors for p in t.pieces
             if p.expert is None]
    if not sizes or max(n for n, _ in sizes) <= FIRST_LOOK_ENTRIES:
        return None
    first = min(p.layer for _, p in sizes)
    smallest = sorted((n, p.component) for n, p in sizes if p.layer == first)[:count]
    return sorted({c for _, c in smallest}, key=plan.model_components.index)


def same_source(a, b) -> bool:
    """Whether two sources name one checkpoint: a path and its text are one (the form's Resume gives the
    text of the path the pass was started with; taken for another model, the run started again, its
    cached cells counted as computed and its earlier segments lost)."""
    def name(s):
        return os.fspath(s) if isinstance(s, (str, os.PathLike)) else s

    return name(a) == name(b)


def needs_spectra(metrics, stats_kws: dict) -> bool:
    """Whether a pass of ``metrics`` computes singular values (a spectral metric, or ``keep_spectra``); True
    when the metrics cannot be resolved (the pass itself says why)."""
    from toolkit.metrics import resolve_metrics

    try:
        chosen = resolve_metrics(metrics)
    except Exception:  # noqa: BLE001 - the pass itself says what is wrong with the metrics
        return True
    return bool(stats_kws.get("keep_spectra")) or any(m.needs_singular_values for m in chosen)


def tensor_sizes(plan, stats_kws: dict, *, spectra: bool = True) -> dict | None:
    """The :class:`~toolkit.widgets.live_clock.Cost` of each tensor the pass will measure (``plan`` with the
    selection applied; no spectral part without ``spectra``); None when unknown."""
    if plan is None:
        return None
    from toolkit.collect.plan.selection import Selection

    try:
        selected = plan.select(Selection.of(*(stats_kws.get(k) for k in SELECTION_KEYS)))
    except Exception:  # noqa: BLE001 - the pass itself says what is wrong with the selection
        return None
    return {t.record.name: cost_of(t.record.shape, spectra=spectra) for t in selected.tensors} or None


def measured(ds) -> np.ndarray | None:
    """Which cells of ``ds`` hold a measured matrix (None when it does not say)."""
    return ds.parameter_name.values != "" if "parameter_name" in ds.coords else None


def covers(new, old) -> bool:
    """Whether showing ``new`` in place of ``old`` loses no cell (another grid always replaces)."""
    if old is None:
        return True
    a, b = measured(new), measured(old)
    if a is None or b is None or a.shape != b.shape:
        return True
    return bool((a | ~b).all())


def look_fixed(ds):
    """A first look's Dataset with its cells still to come unmarked (here "not selected" means "not yet")."""
    reason = ds.nan_reason.values.astype(str)
    unmeasured = np.char.startswith(reason, "not selected")
    return ds.assign_coords(nan_reason=(ds.nan_reason.dims, np.where(unmeasured, "", reason)))


def is_large(sizes: dict | None) -> bool:
    """Whether the tensors of ``sizes`` (name -> :class:`~toolkit.widgets.live_clock.Cost`) include one of more
    than :data:`FIRST_LOOK_ENTRIES` entries: a pass of minutes, worth a first look and a probe of the machine."""
    return bool(sizes) and max(c.entries for c in sizes.values()) > FIRST_LOOK_ENTRIES
