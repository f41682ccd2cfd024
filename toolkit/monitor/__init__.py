"""Statistics of a model while it trains: the monitor behind ``toolkit.watch``.

Public API
----------
watch(model, metrics=..., every=N, store=...) -> Monitor
    Call ``monitor.step(global_step)`` after each optimizer step; ``monitor.dataset`` holds the
    records, dims ``(step, layer, component)``.
``toolkit.load(store)``
    The records of a store folder, also while the run writes it.
WatchCallback
    The ``transformers.TrainerCallback`` (in :mod:`toolkit.integrations`).
"""

from toolkit.errors import WatchFellBehind
from toolkit.monitor.monitor import DEFAULT_METRICS, Monitor, watch

__all__ = ["DEFAULT_METRICS", "Monitor", "WatchFellBehind", "watch"]
