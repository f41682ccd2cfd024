"""The one evaluator of weight metrics on a matrix: one spectrum shared by every spectral metric."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class MatrixResult:
    """Every requested metric of one matrix.

    Attributes
    ----------
    shape : (int, int)
        (out_features, in_features); (0, 0) for an input that is not a matrix.
    values : dict of str -> float
        NaN where the metric is undefined for this matrix.
    reasons : dict of str -> str
        Why a value is NaN.
    errors : set of str
        The metrics whose NaN came from an exception (a failure of the
        computation, not a property of the matrix): shown, never cached.
    eigenvalues : numpy.ndarray or None
        With ``keep_spectrum``: the eigenvalues λ_i = σ_i² of WᵀW, float64,
        descending (None where the spectrum could not be computed).
    precision_served : str
        With ``precision="float32-certified"``: ``"float32"`` where the
        certificate held (:mod:`toolkit.metrics.certificate`), ``"float64"``
        where the cell was recomputed in float64; ``""`` otherwise (or where
        no metric read the spectrum).
    certificate : str
        Why the float32 spectrum was not served (``""`` where it was).
    bound : EigenvalueBound or None
        The certificate's eigenvalue bound, where one was computed.
    """

    shape: tuple[int, int]
    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    errors: set = field(default_factory=set)
    eigenvalues: object = None
    precision_served: str = ""
    certificate: str = ""
    bound: object = None

    def fail(self, metrics, reason: str, *, error: bool = False) -> None:
        for m in metrics:
            self.values[m.name], self.reasons[m.name] = math.nan, reason
            if error:
                self.errors.add(m.name)


_FLOAT32 = torch.finfo(torch.float32)


def float32_range_reason(w: torch.Tensor) -> str:
    """Why the float64 ``w`` cannot be read in float32, as the weight metrics read every matrix, or ``""``.

    Finite entries above float32's largest value (3.4e38) would read as Inf; and where even the largest entry
    is below :math:`2^{23}` times float32's smallest normal value (about 1e-31), every entry would lose bits to
    the subnormal range or read as 0. Cast, a matrix of entries ~1e150 was reported as "NaN/Inf entries" and one
    of ~1e-150 as an all-zero matrix of Frobenius norm 0 and rank 0. Entries that are tiny only beside the
    largest (below float32's rounding of it) are cast as float32 rounds any entry: they do not refuse the matrix.
    Other dtypes (float32, bfloat16, float16, the 8-bit floats) always fit; NaN/Inf entries are left to the NaN
    check.

    Parameters
    ----------
    w : torch.Tensor
        Any dtype and shape.

    Returns
    -------
    str
        The reason, naming the largest magnitude found and the way out, or ``""``.
    """
    if w.dtype != torch.float64 or w.numel() == 0:
        return ""
    a = w.detach().abs()
    a = a[torch.isfinite(a)]
    high = float(a.max()) if a.numel() else 0.0
    if high == 0.0 or _FLOAT32.tiny / _FLOAT32.eps <= high <= _FLOAT32.max:
        return ""
    return (f"float64 entries of largest magnitude {high:.3g}, outside what float32 holds without loss "
            f"({_FLOAT32.tiny / _FLOAT32.eps:.3g} to {_FLOAT32.max:.3g}), and matrices are measured in float32: "
            "scale the matrix by a power of two into that range (the ratios, ranks and exponents do not change; "
            "norms scale with it)")


def evaluate_matrix(w: torch.Tensor, metrics: list, *, s: torch.Tensor | None = None, device: str = "cpu",
                    strict: bool = False, keep_spectrum: bool = False, precision: str = "float64") -> MatrixResult:
    """Compute ``metrics`` on one matrix.

    Parameters
    ----------
    w : torch.Tensor, shape (out_features, in_features)
        Any float dtype; converted to float32 here (one tensor at a time)
        unless every metric declares ``any_dtype``.
    metrics : list of toolkit.metrics.Metric
        Weight metrics. Singular values are computed once, only if one of
        them declares ``needs_singular_values``, and shared by all.
    s : torch.Tensor, optional
        Precomputed singular values (descending, float64).
    device : str
        Where the singular values are computed (``"cpu"``, ``"cuda"``).
    strict : bool, default False
        Re-raise an exception of a metric (or of the factorisation) instead
        of recording it as a NaN in :attr:`MatrixResult.errors`.
    keep_spectrum : bool, default False
        Also return the eigenvalues of WᵀW (:attr:`MatrixResult.eigenvalues`),
        from the same singular values the spectral metrics use.
    precision : {"float64", "float32", "float32-certified"}, default "float64"
        Of the singular values (:func:`~toolkit.metrics.singular_values`).
        With ``"float32"``, the metrics that read the smallest singular values
        (:data:`~toolkit.metrics.spectral.SMALL_VALUE_METRICS`) are NaN, with
        the reason, where float32 cannot resolve them
        (:func:`~toolkit.metrics.spectral.float32_resolves`).
        ``"float32-certified"``: the float32 Gram's eigenvalues with their
        error bound (:func:`~toolkit.metrics.eigen_bound.certified_spectrum`),
        served where :func:`~toolkit.metrics.certificate.certify` finds every
        spectral metric within its tolerance of the float64 value, else the
        whole cell recomputed in float64
        (:attr:`MatrixResult.precision_served` says which; on CUDA always float64).

    Returns
    -------
    MatrixResult
        NaN with a recorded reason where a metric is undefined for this
        matrix (not 2-D or empty, NaN/Inf entries, all zeros, too short a
        spectrum...) or, unless ``strict``, raised.
    """
    from toolkit.metrics.norms import MOMENT_METRICS, count_nonfinite
    from toolkit.metrics.registry import DegenerateMatrix
    from toolkit.metrics.spectral import CERTIFIED, SMALL_VALUE_METRICS, float32_resolves, singular_values

    result = MatrixResult((int(w.shape[0]), int(w.shape[1])) if w.ndim == 2 else (0, 0))
    if w.ndim != 2 or w.numel() == 0:
        result.fail(metrics, f"not a non-empty matrix (shape {tuple(w.shape)})")
        return result
    if w.is_complex():  # a cast to a real dtype would drop the imaginary part
        result.fail(metrics, f"a complex matrix ({w.dtype}): the weight metrics are defined for real matrices")
        return result
    if keep_spectrum or not all(m.any_dtype for m in metrics):
        narrow = float32_range_reason(w)
        if narrow:
            result.fail(metrics, narrow)
            return result
        w = w.to(torch.float32)
    # one reduction shared with the entry-wise metrics: the moment pass where one of them reads it, else the
    # cheaper sum of squares
    bad = count_nonfinite(w, moments=any(m.name in MOMENT_METRICS for m in metrics))
    if bad:
        result.fail(metrics, f"matrix contains NaN/Inf ({bad} entries)")
        return result
    s_error = None
    if s is None and (keep_spectrum or any(m.needs_singular_values for m in metrics)):
        try:
            if precision == CERTIFIED:
                s = _certified(w, metrics, device, result)
            else:
                s = singular_values(w, device=device, precision=precision)
        except DegenerateMatrix as e:
            s_error = e.reason
        except Exception as e:
            if strict:
                raise
            s_error = f"singular values failed: {type(e).__name__}: {e}"
            result.errors.update(m.name for m in metrics if m.needs_singular_values)
    if keep_spectrum and s is not None:
        result.eigenvalues = (s.detach().to("cpu", torch.float64) ** 2).numpy()
    unresolved = float32_resolves(s, result.shape) if precision == "float32" and s is not None else ""
    for m in metrics:
        if m.needs_singular_values and s is None:
            result.values[m.name], result.reasons[m.name] = math.nan, s_error or "no singular values"
            continue
        if unresolved and m.name in SMALL_VALUE_METRICS:
            result.values[m.name], result.reasons[m.name] = math.nan, unresolved
            continue
        try:
            value, reason = m.evaluate(w, s)
        except Exception as e:
            if strict:
                raise
            value, reason = math.nan, f"{type(e).__name__}: {e}"  # a failing (user) metric is one NaN cell
            result.errors.add(m.name)
        result.values[m.name] = value
        if math.isnan(value):
            result.reasons[m.name] = reason or "undefined for this matrix"
    return result


def _certified(w: torch.Tensor, metrics: list, device, result: MatrixResult) -> torch.Tensor:
    """The singular values ``precision="float32-certified"`` serves, recording which precision in ``result``."""
    from toolkit.devices import check_device
    from toolkit.metrics.certificate import FLOAT32, FLOAT64, certify
    from toolkit.metrics.eigen_bound import certified_spectrum
    from toolkit.metrics.registry import DegenerateMatrix
    from toolkit.metrics.spectral import singular_values

    if check_device(device, available=False).type != "cpu":
        result.precision_served, result.certificate = FLOAT64, "the certificate runs on the CPU only"
        return singular_values(w, device=device)
    spectral = [m for m in metrics if m.needs_singular_values]
    verdicts = {}

    def accept(lam, bound) -> bool:
        verdicts[bound] = certify(spectral, lam, bound, result.shape)
        return not verdicts[bound]

    # the one-pass bound first; the tighter one (two more passes over W) only where that is not enough
    try:
        lam, result.bound = certified_spectrum(w.contiguous(), accept=accept)
    except DegenerateMatrix as e:  # finite entries whose float32 product overflows: the float64 route may not
        result.precision_served, result.certificate = FLOAT64, e.reason
        return singular_values(w, device=device)
    why = verdicts[result.bound] if result.bound in verdicts else certify(spectral, lam, result.bound, result.shape)
    if why:
        result.precision_served, result.certificate = FLOAT64, why
        return singular_values(w, device=device)
    result.precision_served = FLOAT32
    return torch.from_numpy(np.sqrt(lam))
