"""Layer x component statistics of transformer checkpoints, for Jupyter.

Quick start::

    import toolkit
    ds = toolkit.weight_stats()                 # embedded SmolLM2-135M, 30 x 7 grid
    toolkit.plot.heatmap(ds, "stable_rank")
    toolkit.save(ds, "smollm2.nc")

Plotting (``toolkit.plot``) and widgets (``toolkit.widgets``) are imported
lazily, so ``import toolkit`` does not pull matplotlib or ipywidgets.
"""

from __future__ import annotations

import importlib

from toolkit._version import __version__
from toolkit.architectures import Mapping, register_architecture
from toolkit.architectures.vocabulary import COMPONENTS
from toolkit.collect.cache_folders import cache_info, clear_cache
from toolkit.collect.compare import compare, compare_series
from toolkit.collect.weights import cell_spectrum, weight_stats
from toolkit.errors import ToolkitError
from toolkit.io import load, save
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.registry import get_metric, list_metrics, register_metric
from toolkit.sources import SourceRequest, open_source, register_format

__all__ = [
    "COMPONENTS",
    "FitOptions",
    "Mapping",
    "SourceRequest",
    "ToolkitError",
    "__version__",
    "activation_stats",
    "cache_info",
    "cell_spectrum",
    "clear_cache",
    "compare",
    "compare_series",
    "get_metric",
    "list_metrics",
    "load",
    "open_source",
    "plot",
    "register_architecture",
    "register_format",
    "register_metric",
    "save",
    "summary",
    "watch",
    "weight_stats",
    "widgets",
]

_LAZY_SUBMODULES = {"plot", "widgets", "lab", "activations", "integrations"}


def __getattr__(name: str):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"toolkit.{name}")
    if name == "activation_stats":  # lazily: it loads transformers
        return importlib.import_module("toolkit.activations").activation_stats
    if name == "watch":  # lazily: the monitor of a training run
        return importlib.import_module("toolkit.monitor").watch
    if name == "summary":  # lazily: it imports pandas
        return importlib.import_module("toolkit.model_summary").summary
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
