"""Every requested weight metric of one matrix: the public front door to the one evaluator.

:func:`compute_weight_metrics` resolves metric names in the registry
(:mod:`toolkit.metrics.registry`) and hands the matrix to
:func:`toolkit.metrics.evaluate.evaluate_matrix`, the evaluator
``weight_stats`` uses, so a notebook's single matrix and a whole checkpoint
get the same numbers.
"""

from __future__ import annotations

from toolkit.metrics.evaluate import evaluate_matrix
from toolkit.metrics.registry import MetricValue, resolve_metrics


def compute_weight_metrics(w, metrics=None, *, s=None, device="cpu") -> dict[str, MetricValue]:
    """Every requested weight metric of one matrix, sharing one SVD.

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
    metrics : str, list of str or None
        Names (None: every registered weight metric but the opt-in ones).
    s : torch.Tensor, optional
        Precomputed singular values (descending, float64); otherwise computed
        once here if any requested metric needs them.
    device : str or torch.device
        Where the singular values are computed (see ``singular_values``).

    Returns
    -------
    dict of name -> MetricValue
        NaN with a reason where the metric is undefined; if the singular
        values themselves cannot be computed (NaN/Inf entries), every spectral
        metric gets that reason. The same evaluator as ``weight_stats``
        (:func:`toolkit.metrics.evaluate.evaluate_matrix`).

    Raises
    ------
    UnknownMetricError
        A name that is no registered weight metric.
    Exception
        Whatever a metric raises other than ``DegenerateMatrix``.

    Examples
    --------
    >>> import torch
    >>> compute_weight_metrics(torch.eye(4), ["stable_rank"])
    {'stable_rank': MetricValue(value=4.0, reason='')}
    """
    records = resolve_metrics(metrics, kind="weight")
    result = evaluate_matrix(w, records, s=s, device=device, strict=True)
    return {m.name: MetricValue(result.values[m.name], result.reasons.get(m.name, "")) for m in records}
