"""The option constraints the passes share (``weight_stats``, ``cell_spectrum``, ``compare``,
``compare_series``, ``activation_stats``, the explorer's live pass), declared once.

Each group is a dict of :mod:`toolkit.constraints` records, spread into a front door's
``@checks_options(...)``; a rule changed here changes on every front door that takes the option.
"""

from __future__ import annotations

import re

from toolkit import options
from toolkit.collect.assemble.quality import quality_bounds
from toolkit.collect.plan.selection import Selection
from toolkit.constraints import Check, DeviceName, Flag, MetricNames, OneOf, Progress, Real, Whole
from toolkit.errors import InvalidOptionError
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.registry import resolve_metrics
from toolkit.metrics.spectral import PASS_PRECISIONS
from toolkit.sources.request import ADDRESS  # the checkpoint's address: SourceRequest's options

__all__ = ["ADDRESS", "DIFF", "PASS", "SELECTION", "WEIGHTS", "metrics_of"]


def _selection_part(name: str):
    def check(value, where):
        Selection.of(**{name: value}, where=where)
        return value

    return check


#: a scheduler address: ``tcp://host:8786``, ``host:8786``, ``inproc://...`` (Dask's forms; no spaces)
_ADDRESS = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://[^\s]+|[^\s/:]+:\d+)")


def _client(value, where):
    """None, a scheduler address, a ``distributed.Client`` or a Dask cluster (duck-typed: no import of
    distributed here); whether it can be reached is found when the pass connects."""
    if value is None or hasattr(value, "scheduler_address") or type(value).__name__ == "Client" or (
            isinstance(value, str) and _ADDRESS.fullmatch(value)):
        return value
    raise InvalidOptionError("client", value, "None, a distributed.Client, a scheduler address such as "
                             "'tcp://host:8786' or a Dask cluster", where)


def _quality_thresholds(value, where):
    return quality_bounds(value, where)


#: the part of the model a pass measures (:mod:`toolkit.collect.plan.selection`)
SELECTION = {
    "layers": Check(_selection_part("layers"), "abc"),
    "components": Check(_selection_part("components"), ""),
    "experts": Check(_selection_part("experts"), 1.5),
    "fill": Flag(),
}

#: how a pass runs
PASS = {
    "mapping": Check(options.mapping_option, 42),
    "device": DeviceName(),
    "progress": Progress(),
    "cache": Flag(),
    "client": Check(_client, 42),
    "keep_spectra": Flag(),
}

#: the weights pass's own
WEIGHTS = {
    "quality_thresholds": Check(_quality_thresholds, (6.0, 2.0)),
    "precision": OneOf(PASS_PRECISIONS),
    "fit": Check(FitOptions.coerce, {"no_such_option": 1}),
    "per_head": Flag(),
}

#: the diff passes' own
DIFF = {
    "tolerance": Real(minimum=0.0, meaning="entries with |t - b| <= tolerance count as unchanged; 0 compares "
                      "stored bits"),
    "k": Whole(minimum=1, meaning="the subspace dimension of subspace_overlap, clipped to min(out, in) per matrix"),
}


def metrics_of(kind: str) -> dict:
    """``{"metrics": ...}`` for a pass of metrics of ``kind`` (``"weight"``, ``"diff"``)."""
    return {"metrics": MetricNames(kind, resolve=resolve_metrics)}
