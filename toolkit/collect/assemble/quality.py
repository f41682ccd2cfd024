"""The last steps of a weight Dataset: its fit options recorded, WeightWatcher's skip rules, the ESD quality."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from toolkit.errors import InvalidOptionError
from toolkit.metrics.esd_fit import esd_quality
from toolkit.metrics.fit_options import FitOptions


def with_fit_options(ds: xr.Dataset, fit: FitOptions, metrics) -> xr.Dataset:
    """``ds`` with ``fit`` recorded (Dataset attrs ``fit_<name>``; attr ``fit_options`` of each
    variable whose metric takes options) and WeightWatcher's skip rules applied.

    With ``min_evals`` / ``max_evals`` / ``max_N`` set, every metric of a cell
    WeightWatcher would skip is NaN and its ``nan_reason`` says why
    (:meth:`FitOptions.skip_reason`); the spectra stay.
    """
    ds = ds.copy()
    ds.attrs.update(fit.attrs())
    for m in metrics:
        if m.options and m.name in ds:
            ds[m.name].attrs["fit_options"] = ", ".join(f"{k}={v!r}" for k, v in m.options)
    rows, cols = ds.n_rows.values, ds.n_cols.values
    skip = np.array([[fit.skip_reason(int(r), int(c)) if r > 0 else "" for r, c in zip(rr, cc, strict=True)]
                     for rr, cc in zip(rows, cols, strict=True)], dtype=object).reshape(rows.shape)
    hit = skip != ""
    if hit.any():
        for m in metrics:
            ds[m.name] = ds[m.name].where(~hit)
        old = ds.nan_reason.values.astype(object)
        joined = np.where(hit, np.where(old != "", skip + "; " + old, skip), old)
        ds = ds.assign_coords(nan_reason=(("layer", "component"), joined.astype(str), ds.nan_reason.attrs))
    return ds


def quality_bounds(thresholds, where: str = "") -> tuple[float, float]:
    """``(over, under)`` as floats.

    Raises
    ------
    InvalidOptionError
        ``thresholds`` is not two finite numbers with over <= under.
    """
    expected = "two finite numbers (over, under) with over <= under, e.g. (2.0, 6.0)"
    if isinstance(thresholds, (str, bytes)):
        raise InvalidOptionError("quality_thresholds", thresholds, expected, where)
    try:
        over, under = (float(t) for t in thresholds)
    except (TypeError, ValueError):
        raise InvalidOptionError("quality_thresholds", thresholds, expected, where) from None
    if not (math.isfinite(over) and math.isfinite(under) and over <= under):
        raise InvalidOptionError("quality_thresholds", thresholds, expected, where)
    return over, under


def with_quality(ds: xr.Dataset, thresholds=(2.0, 6.0)) -> xr.Dataset:
    """``ds`` with the string coordinate ``quality`` (layer, component) from its ``alpha``
    (:func:`toolkit.metrics.esd_fit.esd_quality`); ``ds`` unchanged without ``alpha``.

    Raises
    ------
    InvalidOptionError
        As :func:`quality_bounds`.
    """
    over, under = quality_bounds(thresholds)
    if "alpha" not in ds:
        return ds
    reasons = np.where(ds.n_rows.values > 0, ds.nan_reason.values, "no such matrix in this model")
    labels = np.asarray(esd_quality(ds.alpha.values, over=over, under=under, reason=reasons), dtype=str)
    return ds.assign_coords(quality=(("layer", "component"), labels, {
        "long_name": "ESD quality from alpha",
        "description": f"over-trained: alpha < {over:g}; under-trained: alpha > {under:g}; ok between; "
                       "else why alpha could not be fitted",
        "over_trained_below": over, "under_trained_above": under,
        "reference": "Martin & Mahoney 2021; WeightWatcher's warning column"}))
