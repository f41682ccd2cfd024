"""Per-(layer, component) sparsity for a global budget from a Dataset's ``alpha``: AlphaPruning's allocation.

AlphaPruning (Lu et al., NeurIPS 2024, arXiv 2410.10912, §3, the layer-wise sparsity allocation) reads the
heavy-tail exponent of each layer's empirical spectral density as how well trained the layer is: a smaller
alpha (a heavier tail) marks a better-trained layer, which is pruned less. :func:`alpha_allocation` turns the
``alpha`` variable of a :func:`toolkit.weight_stats` Dataset into that allocation, with the reverse one
(smaller alpha pruned more) as the control. Pure: no I/O, no torch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr

from toolkit import options
from toolkit.constraints import Constraint, Flag, OneOf, checks_options
from toolkit.errors import InvalidOptionError

__all__ = ["DEFAULT_EPSILON", "alpha_allocation"]

#: The half-width of the mapping's range, ``[1 - ε, 1 + ε]`` before scaling. The authors tune it per model and
#: pruning method; 0.3 is the value of their README's example for magnitude pruning of LLaMA-7B at 70 %.
DEFAULT_EPSILON = 0.3

REFERENCE = ("Lu, Zhou, Liu, Hu, Mahoney, Yang, 'AlphaPruning: Using Heavy-Tailed Self Regularization Theory for "
             "Improved Layer-wise Pruning of Large Language Models', NeurIPS 2024, arXiv:2410.10912, §3 (the "
             "linear mapping of the layer metric to [s1, s2] = [1 - ε, 1 + ε], then scaled to the global budget), "
             "and the authors' code (ww_sparsity: block-wise mean of the metric, parameter-weighted scaling)")


@dataclass(frozen=True)
class _Fraction(Constraint):
    """A finite real number in ``[0, 1)``; ``meaning`` ends the message."""

    meaning: str

    def check(self, value, option, where):
        number = options.real_number(value, option, where, minimum=0.0, meaning=self.meaning)
        if number >= 1.0:
            raise InvalidOptionError(option, value, f"a finite number >= 0 and < 1 ({self.meaning})", where)
        return number

    def invalid(self):
        return 1.0


@dataclass(frozen=True)
class _AlphaDataset(Constraint):
    """An ``xarray.Dataset`` with ``alpha`` over (layer, component) and the ``n_rows`` / ``n_cols`` coordinates of
    :func:`toolkit.weight_stats`."""

    def check(self, value, option, where):
        expected = ("an xarray.Dataset of toolkit.weight_stats with the variable 'alpha' (layer, component) and the "
                    "coordinates n_rows, n_cols (measure it: toolkit.weight_stats(source, metrics=['alpha']))")
        if not isinstance(value, xr.Dataset) or "alpha" not in value.data_vars \
                or set(value["alpha"].dims) != {"layer", "component"} \
                or not {"n_rows", "n_cols"} <= set(value.coords):
            raise InvalidOptionError(option, _shown(value), expected, where)
        return value

    def invalid(self):
        return xr.Dataset()


def _shown(value) -> str:
    """A short stand-in for a Dataset in an error message (its variables and dims, not its repr)."""
    if isinstance(value, xr.Dataset):
        return f"<Dataset with variables {sorted(map(str, value.data_vars))} and dims {dict(value.sizes)}>"
    return repr(value)[:80]


@checks_options(ds=_AlphaDataset(), sparsity=_Fraction("the global share of weights set to zero"),
                epsilon=_Fraction("the half-width of the mapping's range around 1"),
                granularity=OneOf(("layer", "matrix")), reverse=Flag())
def alpha_allocation(ds: xr.Dataset, sparsity: float, *, epsilon: float = DEFAULT_EPSILON,
                     granularity: str = "layer", reverse: bool = False) -> xr.DataArray:
    """AlphaPruning's sparsity of every weight matrix for a global budget, from the Dataset's ``alpha``.

    Parameters
    ----------
    ds : xarray.Dataset
        A :func:`toolkit.weight_stats` Dataset with ``alpha`` (layer, component) and the matrix shapes
        ``n_rows``, ``n_cols`` (layer, component) as coordinates.
    sparsity : float, in [0, 1)
        The global budget S: the share of all the matrices' weights to set to zero, counted in weights (a
        matrix counts ``n_rows * n_cols``).
    epsilon : float, in [0, 1), default 0.3 (:data:`DEFAULT_EPSILON`)
        The half-width ε of the mapping's range ``[1 - ε, 1 + ε]``; 0 gives the uniform allocation. The paper
        tunes it per model; 0.3 is its authors' value for magnitude pruning of LLaMA-7B.
    granularity : {"layer", "matrix"}, default "layer"
        ``"layer"`` (the paper's): the metric of a layer is the mean alpha of its matrices and every matrix of
        the layer gets the layer's sparsity. ``"matrix"``: each matrix's own alpha is its metric.
    reverse : bool, default False
        The mirror allocation, ``[1 + ε, 1 - ε]``: smaller alpha pruned *more* (the control of the paper's claim).

    Returns
    -------
    xarray.DataArray
        ``sparsity`` (layer, component), each matrix's share of weights to zero, in [0, 1); NaN where the
        Dataset has no matrix (``n_rows`` or ``n_cols`` missing or 0). Its parameter-weighted mean over the
        matrices is ``sparsity``. Attrs: ``long_name``, ``units`` ("1"), ``description``, ``reference``, and the
        settings (``budget``, ``epsilon``, ``granularity``, ``allocation``: ``"alpha"`` or ``"reverse alpha"``).
        ``n_rows`` / ``n_cols`` stay as coordinates.

    Raises
    ------
    InvalidOptionError
        ``ds`` without ``alpha`` (layer, component) or the shape coordinates; ``sparsity`` or ``epsilon`` outside
        [0, 1); an unknown ``granularity``; a non-bool ``reverse``; an ``epsilon`` so large for this budget that
        a matrix would get a sparsity of 1 or more (the scaling below has no cap; choose a smaller ε).

    Notes
    -----
    With ``q_i`` the metric of cell i (its layer's mean alpha, or its own), ``q_min`` and ``q_max`` its extremes
    over the cells, and ``w_i = n_rows * n_cols``:

    .. math::

        m_i = (1 - ε) + 2ε \\frac{q_i - q_{min}}{q_{max} - q_{min}}, \\qquad
        s_i = m_i \\, S \\frac{\\sum_j w_j}{\\sum_j w_j m_j}

    (paper §3: the linear map to ``[s1, s2]`` with ``(s1, s2) = (1 - ε, 1 + ε)``, then one factor so the
    parameter-weighted mean sparsity is S, as the authors' ``ww_sparsity`` does). ``reverse`` uses
    ``2 - m_i``. Choices the paper does not fix, made here:

    - Metric: the Dataset's ``alpha`` (WeightWatcher's default power-law fit). The paper describes its metric
      as PL_Alpha_Hill (a Hill estimate of the tail exponent); the metric file its released scripts read is
      named ``alpha_peak`` (WeightWatcher's alpha with ``fix_fingers="xmin_peak"``, as we read it). For the
      latter, pass a Dataset measured with ``fit=toolkit.FitOptions(fix_fingers="xmin_peak")``.
    - NaN alpha (a matrix the fit skipped): left out of its layer's mean; a cell whose metric is still NaN
      (``"matrix"``, or a layer with no fitted matrix) gets the middle of the range, ``m_i = 1``, as if of
      average alpha; it is still pruned and still counts in the budget.
    - All metrics equal (``q_max = q_min``), or ε = 0: ``m_i = 1``, the uniform allocation.
    - No cap at 1: where ``s_i >= 1`` for some cell the call raises instead of clipping and re-spreading.

    References
    ----------
    Lu, H., Zhou, Y., Liu, S., Wang, Z., Mahoney, M. W., Yang, Y. AlphaPruning: Using Heavy-Tailed Self
    Regularization Theory for Improved Layer-wise Pruning of Large Language Models. NeurIPS 2024,
    arXiv:2410.10912, §3 (the method; its subsection number is cited from memory). Code: the authors'
    repository, ``lib/prune.py``, ``ww_sparsity`` (s1, s2 = 1 - ε, 1 + ε; block-wise mean of the metric;
    parameter-weighted scaling to the budget).

    Examples
    --------
    >>> import toolkit
    >>> from toolkit.analysis import alpha_allocation
    >>> ds = toolkit.weight_stats(metrics=["alpha"], progress=False)          # doctest: +SKIP
    >>> alpha_allocation(ds, 0.7).sel(layer=0).values.round(2)                 # doctest: +SKIP
    """
    alpha = ds["alpha"].transpose("layer", "component")
    weight = _sizes(ds).transpose("layer", "component").values
    present = np.isfinite(weight) & (weight > 0)
    values = np.where(present, alpha.values.astype(float), np.nan)
    if granularity == "layer":
        with warnings.catch_warnings():  # a layer with no fitted matrix: an all-NaN row, expected
            warnings.simplefilter("ignore", RuntimeWarning)
            per_layer = np.nanmean(values, axis=1, keepdims=True)
        metric = np.broadcast_to(per_layer, values.shape)
    else:
        metric = values
    mapped = _linear_map(np.where(present, metric, np.nan), epsilon)
    if reverse:
        mapped = 2.0 - mapped
    w = np.where(present, weight, 0.0)
    scale = sparsity * w.sum() / (w * np.where(present, mapped, 0.0)).sum() if w.sum() > 0 else np.nan
    out = np.where(present, mapped * scale, np.nan)
    if np.nanmax(out, initial=0.0) >= 1.0:
        layer, comp = np.unravel_index(np.nanargmax(out), out.shape)
        raise InvalidOptionError(
            "epsilon", epsilon, f"a smaller value: with sparsity={sparsity:g} it allots layer "
            f"{int(alpha.layer[layer])} {alpha.component.values[comp]} a sparsity of {out[layer, comp]:.3f} >= 1",
            "toolkit.analysis.alpha_allocation")
    which = "reverse alpha" if reverse else "alpha"
    return xr.DataArray(
        out, dims=("layer", "component"),
        coords={"layer": alpha.layer, "component": alpha.component, "n_rows": ds["n_rows"], "n_cols": ds["n_cols"]},
        name="sparsity",
        attrs={"long_name": f"allocated sparsity ({which})", "units": "1",
               "description": ("share of each matrix's weights to set to zero; m = (1 - eps) + 2 eps (q - q_min) / "
                               "(q_max - q_min)" + (", reversed to 2 - m" if reverse else "")
                               + f", q = {'the layer mean of alpha' if granularity == 'layer' else 'alpha'}; "
                               "s = m S sum(w) / sum(w m), w = n_rows n_cols; NaN alpha: m = 1"),
               "reference": REFERENCE, "budget": float(sparsity), "epsilon": float(epsilon),
               "granularity": granularity, "allocation": which})


def _sizes(ds: xr.Dataset) -> xr.DataArray:
    """``n_rows * n_cols`` (layer, component) as floats (NaN where a shape is missing)."""
    return ds["n_rows"].astype(float) * ds["n_cols"].astype(float)


def _linear_map(metric: np.ndarray, epsilon: float) -> np.ndarray:
    """The metric mapped linearly onto ``[1 - ε, 1 + ε]`` (its minimum to ``1 - ε``); NaN and a constant metric
    to 1."""
    finite = np.isfinite(metric)
    if not finite.any():
        return np.ones_like(metric)
    low, high = metric[finite].min(), metric[finite].max()
    if high == low:
        return np.ones_like(metric)
    mapped = (1.0 - epsilon) + 2.0 * epsilon * (metric - low) / (high - low)
    return np.where(finite, mapped, 1.0)

