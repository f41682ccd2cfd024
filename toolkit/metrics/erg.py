r"""The ERG / :math:`\det X = 1` tail of a spectrum: the opt-in ``erg_*`` metrics.

SETOL (Martin & Hinrichs 2025) predicts that a well-trained layer's heavy-tailed part, its
*effective correlation space*, satisfies an Exact Renormalization Group (ERG) condition: the
determinant of the (normalised) correlation matrix restricted to the tail is one,
:math:`\det \tilde X_{tail} = \prod_{i \in tail} \tilde\lambda_i = 1`, i.e.
:math:`\sum_{i \in tail} \ln \tilde\lambda_i = 0`. WeightWatcher 0.7.7 measures it with
``analyze(ERG=True)`` (an alias of ``detX=True``: its ``apply_detX`` and
``RMT_Util.detX_constraint``, the reference for the exact definition used here):

1. :math:`\lambda_1 \ge \dots \ge \lambda_k` are the eigenvalues of :math:`W^\top W`
   (:math:`\lambda_i = \sigma_i^2`, unnormalised, all :math:`k = \min(m, n)` of them),
   rescaled to mean 1: :math:`\tilde\lambda_i = k \lambda_i / \sum_j \lambda_j`
   (the rescaling of the Marchenko-Pastur fit, WeightWatcher's ``rescale_eigenvalues``);
2. the ERG tail is the top :math:`t^*` eigenvalues,
   :math:`t^* = \min\{t \ge 1 : \prod_{i=1}^{t} \tilde\lambda_i < 1\}`: the product of the
   largest ones first grows (they exceed the mean) and then falls; :math:`t^*` is where it
   first drops below one, the smallest tail whose determinant reaches 1;
3. ``erg_num_spikes`` = :math:`t^*` [``detX_num``, also written as ``num_ERG_spikes``];
   ``erg_gap`` = :math:`t^* -` ``num_pl_spikes`` [``ERG_gap``], how much longer the ERG
   tail is than the power-law fit's (SETOL's "ideal" layer has the two tails coincide, gap 0);
   ``erg_xmin`` = :math:`\lambda_{t^*}`, the smallest eigenvalue of the ERG tail, in the
   units of :math:`\lambda` [``detX_val``]; ``erg_xmin_rescaled`` =
   :math:`\tilde\lambda_{t^*}` [``detX_val_unrescaled``: despite its name, the rescaled value].

Computed here as the first :math:`t` where the cumulative sum of :math:`\ln\tilde\lambda_i`
is negative (one pass, :math:`O(k)`; never overflows: WeightWatcher multiplies the
eigenvalues directly, for every :math:`t`, which is :math:`O(k^2)` and overflows to inf once
the product of the eigenvalues above the mean exceeds ~1e308, then reports :math:`t^* = k`).
By the AM-GM inequality the product of all :math:`k` rescaled eigenvalues is below 1 unless
they are all equal, so :math:`t^*` exists for every spectrum that is not flat. Where
WeightWatcher's search (:math:`t \le k - 1`) finds none it reports :math:`k` with the
second-smallest eigenvalue as ``detX_val``; here the search runs to :math:`t = k`
(the same :math:`t^*`) and ``erg_xmin`` is the smallest eigenvalue, :math:`\lambda_k`.

These are opt-in metrics, as ``ERG=True`` is in WeightWatcher: ``weight_stats(metrics=None)``
does not compute them; name them in ``metrics``.

References
----------
Martin, C. H. & Hinrichs, C. (2025). SETOL: A Semi-Empirical Theory of (Deep) Learning.
arXiv:2507.17912 (the ERG condition, :math:`\det \tilde X = 1` on the effective correlation space).
WeightWatcher 0.7.7, ``WeightWatcher.apply_detX`` and ``RMT_Util.detX_constraint``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from toolkit.metrics.power_law_tail import flat_reason
from toolkit.metrics.powerlaw import FIT_METRIC_OPTIONS, spectrum_fit
from toolkit.metrics.registry import DegenerateMatrix, register_metric

__all__ = ["ErgTail", "erg_tail", "erg_num_spikes", "erg_gap", "erg_xmin", "erg_xmin_rescaled"]

REFERENCE = ("Martin & Hinrichs (2025), SETOL, arXiv:2507.17912 (ERG condition det X = 1); "
             "WeightWatcher 0.7.7 analyze(ERG=True) column ")


class ErgTail(NamedTuple):
    """The ERG tail of one spectrum (module docstring).

    Attributes
    ----------
    num_spikes : int
        :math:`t^*`, eigenvalues in the tail (WeightWatcher's ``detX_num``).
    xmin : float
        :math:`\\lambda_{t^*}`, its smallest eigenvalue (``detX_val``), units of the eigenvalues given.
    xmin_rescaled : float
        :math:`\\tilde\\lambda_{t^*} = k \\lambda_{t^*} / \\sum_j \\lambda_j` (``detX_val_unrescaled``).
    """

    num_spikes: int
    xmin: float
    xmin_rescaled: float


def erg_tail(eigenvalues, name: str = "erg_num_spikes") -> ErgTail:
    r"""The ERG / :math:`\det X = 1` tail of a spectrum (module docstring, steps 1-3).

    Parameters
    ----------
    eigenvalues : array-like, shape (k,)
        Eigenvalues :math:`\lambda_i \ge 0` of :math:`W^\top W`, any order (tiny negative
        rounding is read as 0).
    name : str, default "erg_num_spikes"
        The metric named in a :class:`DegenerateMatrix`.

    Returns
    -------
    ErgTail

    Raises
    ------
    DegenerateMatrix
        Fewer than 2 eigenvalues, non-finite ones, an all-zero spectrum, or a flat one (all
        eigenvalues equal within rounding, :func:`~toolkit.metrics.power_law_tail.flat_reason`: every
        tail has determinant 1, none is singled out; an orthogonal matrix's rounding noise gave 93).

    Examples
    --------
    >>> erg_tail([4.0, 1.0, 0.5, 0.5])  # rescaled 2.667, 0.667, ...: 2.667 * 0.667 = 1.78, * 0.333 < 1
    ErgTail(num_spikes=3, xmin=0.5, xmin_rescaled=0.3333333333333333)
    """
    lam = np.sort(np.clip(np.asarray(eigenvalues, dtype=np.float64).ravel(), 0.0, None))[::-1]
    if lam.size < 2:
        raise DegenerateMatrix(f"{lam.size} eigenvalue(s): the ERG tail needs at least 2", name)
    if not np.all(np.isfinite(lam)):
        raise DegenerateMatrix("non-finite eigenvalues", name)
    total = float(lam.sum())
    if not total > 0.0:
        raise DegenerateMatrix("all-zero matrix", name)
    if flat_reason(float(lam[-1]), float(lam[0]), lam.size):  # equal within rounding (power_law_tail.flat_reason)
        raise DegenerateMatrix("flat spectrum (equal within rounding): every tail has det X = 1", name)
    rescaled = lam * (lam.size / total)
    with np.errstate(divide="ignore"):
        below = np.flatnonzero(np.cumsum(np.log(rescaled)) < 0.0)
    t = int(below[0]) + 1 if below.size else lam.size  # none: only by rounding on a near-flat spectrum
    return ErgTail(t, float(lam[t - 1]), float(rescaled[t - 1]))


def _tail(s: torch.Tensor | None, name: str) -> ErgTail:
    if s is None or s.numel() == 0:
        raise DegenerateMatrix("no singular values", name)
    sv = s.detach().to("cpu", torch.float64).numpy()
    return erg_tail(sv * sv, name)


def erg_num_spikes(w, s) -> float:
    r"""Eigenvalues in the ERG tail, :math:`t^* = \min\{t : \prod_{i \le t} \tilde\lambda_i < 1\}`
    (module docstring; WeightWatcher's ``detX_num`` / ``num_ERG_spikes``).

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
        Not read.
    s : torch.Tensor, shape (k,)
        The cell's shared singular values.

    Returns
    -------
    float
        An integer count in ``[1, k]``.

    Raises
    ------
    DegenerateMatrix
        See :func:`erg_tail`.
    """
    return float(_tail(s, "erg_num_spikes").num_spikes)


def erg_xmin(w, s) -> float:
    r"""The smallest eigenvalue :math:`\lambda_{t^*}` of the ERG tail, units of :math:`\lambda = \sigma^2`
    (WeightWatcher's ``detX_val``).

    Raises
    ------
    DegenerateMatrix
        See :func:`erg_tail`.
    """
    return _tail(s, "erg_xmin").xmin


def erg_xmin_rescaled(w, s) -> float:
    r""":math:`\tilde\lambda_{t^*} = k \lambda_{t^*} / \sum_j \lambda_j`, the ERG tail's smallest eigenvalue
    over the mean eigenvalue (WeightWatcher's ``detX_val_unrescaled``, which is the rescaled value).

    Raises
    ------
    DegenerateMatrix
        See :func:`erg_tail`.
    """
    return _tail(s, "erg_xmin_rescaled").xmin_rescaled


def erg_gap(w, s, **fit_options) -> float:
    r"""``erg_num_spikes - num_pl_spikes``: the ERG tail's length less the power-law tail's
    (WeightWatcher's ``ERG_gap``; 0 where the two tails coincide, SETOL's ideal layer).

    Parameters
    ----------
    w : torch.Tensor, shape (out, in)
        Not read.
    s : torch.Tensor, shape (k,)
        The cell's shared singular values.
    **fit_options
        The power-law fit's options (:func:`~toolkit.metrics.powerlaw.spectrum_fit`), the same
        as the Dataset's ``num_pl_spikes``.

    Returns
    -------
    float
        An integer, negative where the power-law tail is the longer.

    Raises
    ------
    DegenerateMatrix
        See :func:`erg_tail`, or where ``alpha`` is undefined.
    """
    tail = _tail(s, "erg_gap")
    try:
        fit = spectrum_fit(s, **fit_options)
    except DegenerateMatrix as e:
        raise DegenerateMatrix(e.reason, "erg_gap") from None
    return float(tail.num_spikes - fit.num_pl_spikes)


_SPECS = [
    ("erg_num_spikes", erg_num_spikes, "eigenvalues in the ERG (det X = 1) tail", "detX_num",
     "t* = min{t : prod_{i<=t} lambda~_i < 1}, lambda~_i = k lambda_i / sum_j lambda_j (mean 1), lambda_i = "
     "sigma_i^2 descending, k = min(m, n)", {}),
    ("erg_gap", erg_gap, "ERG tail less power-law tail", "ERG_gap",
     "erg_gap = erg_num_spikes - num_pl_spikes (the power-law fit's tail)", dict(FIT_METRIC_OPTIONS)),
    ("erg_xmin", erg_xmin, "smallest eigenvalue of the ERG tail", "detX_val",
     "erg_xmin = lambda_{t*} (the t*-th largest eigenvalue of W^T W, lambda = sigma^2)", {}),
    ("erg_xmin_rescaled", erg_xmin_rescaled, "smallest eigenvalue of the ERG tail over the mean eigenvalue",
     "detX_val_unrescaled", "erg_xmin_rescaled = lambda~_{t*} = k lambda_{t*} / sum_j lambda_j", {}),
]
for _name, _func, _long, _col, _desc, _options in _SPECS:
    register_metric(_name, _func, long_name=_long, units="1", description=_desc, reference=REFERENCE + _col,
                    needs_singular_values=True, options=_options, opt_in=True)
