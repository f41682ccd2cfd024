"""Per-head statistics of the attention matrices, measured in the weight pass through the one evaluator.

``weight_stats(per_head=True)``: each attention cell's head slices
(:func:`toolkit.metrics.per_head.head_slices`: row blocks of q, k, v, column
blocks of o; GQA aware) are measured with the registered metrics of
:data:`~toolkit.metrics.per_head.HEAD_STATS` by
:func:`toolkit.metrics.evaluate.evaluate_matrix`, with the run's fit
options, device and precision, when the cell itself is measured: each
attention tensor is read once. Their results live in the cell's cache entry,
keyed by the metric key and the head layout (counts, head_dim, index), so a
config with other head counts never reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.per_head import HEAD_STATS, head_count, head_slices
from toolkit.metrics.registry import DegenerateMatrix


@dataclass(frozen=True)
class HeadSpec:
    """What every attention cell of a pass shares for its per-head statistics.

    Attributes
    ----------
    num_heads, num_kv_heads, head_dim : int
        From the config (query heads; key/value heads, fewer with GQA).
    metrics : tuple of Metric
        The registered metrics of :data:`HEAD_STATS`, with the run's fit options.
    keys : dict
        Metric name -> cache key (the key the whole-matrix value would have).
    """

    num_heads: int
    num_kv_heads: int
    head_dim: int
    metrics: tuple
    keys: dict

    @classmethod
    def of(cls, config: dict, metrics, keys: dict, location: str = "") -> HeadSpec:
        """The spec of a checkpoint's ``config``.

        Raises
        ------
        ToolkitError
            The config does not give the head counts.
        """
        from toolkit.architectures.base import Dims
        from toolkit.errors import ToolkitError

        dims = Dims.from_config(config)
        if not (dims.num_attention_heads and dims.num_key_value_heads and dims.head_dim):
            raise ToolkitError("per_head=True needs num_attention_heads (and head_dim or hidden_size) in the config; "
                               f"{location!r} has {dims}")
        return cls(int(dims.num_attention_heads), int(dims.num_key_value_heads), int(dims.head_dim),
                   tuple(metrics), dict(keys))

    def count(self, component: str) -> int:
        """Heads of ``component`` (0 for a component without heads)."""
        return head_count(component, self.num_heads, self.num_kv_heads)

    def key(self, stat: str, head: int) -> str:
        """Cache key of ``stat`` of head ``head``: the metric key and the head layout."""
        return f"head:{self.num_heads}/{self.num_kv_heads}x{self.head_dim}:{head}|{self.keys[stat]}"

    def cached(self, component: str, results: dict) -> dict | None:
        """``{stat: [(value, reason) per head]}`` from a cell's cached ``results``; None when any is missing."""
        n = self.count(component)
        keys = {stat: [self.key(stat, h) for h in range(n)] for stat in HEAD_STATS}
        if not n or not all(k in results for ks in keys.values() for k in ks):
            return None
        return {stat: [results[k] for k in ks] for stat, ks in keys.items()}

    def measure(self, w, component: str, *, device: str = "cpu", precision: str = "float64") -> tuple[dict, set]:
        """``({stat: [(value, reason) per head]}, failed)`` of one attention matrix ``w`` (out, in).

        ``failed`` holds ``(stat, head)`` of the values that came from an
        exception (shown, never cached). A matrix whose side is not
        ``heads * head_dim`` long gives NaN for every head, with the reason.
        """
        n = self.count(component)
        try:
            parts = head_slices(w, component, n, self.head_dim)
        except DegenerateMatrix as e:
            return {stat: [(math.nan, e.reason)] * n for stat in HEAD_STATS}, set()
        out: dict = {stat: [] for stat in HEAD_STATS}
        failed = set()
        for h, part in enumerate(parts):
            r = evaluate_matrix(part, list(self.metrics), device=device, precision=precision)
            for m in self.metrics:
                out[m.name].append((r.values[m.name], r.reasons.get(m.name, "")))
                if m.name in r.errors:
                    failed.add((m.name, h))
        return out, failed

    def results(self, heads: dict, failed: set) -> tuple[dict, dict]:
        """``(results, cacheable)`` of measured ``heads``: ``{cache key: (value, reason)}``, and the same
        without the ``failed`` ones."""
        results = {self.key(stat, h): v for stat, values in heads.items() for h, v in enumerate(values)}
        keep = {self.key(stat, h): v for stat, values in heads.items() for h, v in enumerate(values)
                if (stat, h) not in failed}
        return results, keep
