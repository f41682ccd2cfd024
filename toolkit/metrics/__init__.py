"""Statistics of weight matrices: a registry of pure functions with metadata.

>>> import torch
>>> from toolkit.metrics import compute_weight_metrics
>>> compute_weight_metrics(torch.eye(4), ["stable_rank", "condition_number"])
{'stable_rank': MetricValue(value=4.0, reason=''), 'condition_number': MetricValue(value=1.0, reason='')}
"""

from toolkit.errors import DegenerateMatrix, DuplicateMetricError, DuplicateRegistrationError
from toolkit.metrics import builtin  # noqa: F401  (registers the built-ins, in order)
from toolkit.metrics.compute import compute_weight_metrics
from toolkit.metrics.esd_fit import esd_quality, ww_skip_reason
from toolkit.metrics.fit_options import FitOptions
from toolkit.metrics.powerlaw import PowerLawFit, fit_power_law, spectrum_fit
from toolkit.metrics.registry import (
    Metric,
    MetricValue,
    get_metric,
    list_metrics,
    register_metric,
    resolve_metrics,
    unregister_metric,
)
from toolkit.metrics.spectral import singular_values

__all__ = [
    "DegenerateMatrix",
    "DuplicateMetricError",
    "DuplicateRegistrationError",
    "FitOptions",
    "Metric",
    "MetricValue",
    "PowerLawFit",
    "compute_weight_metrics",
    "esd_quality",
    "fit_power_law",
    "get_metric",
    "list_metrics",
    "register_metric",
    "resolve_metrics",
    "singular_values",
    "spectrum_fit",
    "unregister_metric",
    "ww_skip_reason",
]
