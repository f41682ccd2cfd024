"""The power-law fit columns of a Dataset again, under other fit options, from its stored spectra.

``weight_stats(..., keep_spectra=True)`` stores every cell's eigenvalues; the fit
(``alpha`` and its columns, the bootstrap interval, the truncated power law) needs
nothing else. :func:`refit` recomputes those columns under a
:class:`~toolkit.metrics.fit_options.FitOptions` (WeightWatcher's ``fix_fingers``,
``xmax`` ...) without reading the checkpoint: what the explorer's "fit" menu does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import xarray as xr

from toolkit.collect.assemble.quality import with_quality
from toolkit.collect.cells import join_reasons
from toolkit.errors import ToolkitError
from toolkit.metrics.fit_options import FIT_KEYS, FitOptions

__all__ = ["fit_metrics", "refit"]


def fit_metrics(ds) -> list:
    """The registered metrics of ``ds``'s variables that take the fit options and read only the spectrum.

    ``alpha_farms`` reads windows of the matrix itself with its own fit (the FARMS authors'): it is not
    among them (and keeps the values it was measured with).
    """
    from toolkit.metrics.registry import get_metric, list_metrics

    known = set(list_metrics(opt_in=True))
    out = []
    for name in ds.data_vars:
        if name in known:
            m = get_metric(name)
            if m.needs_singular_values and any(k in dict(m.options) for k in FIT_KEYS):
                out.append(m)
    return out


def refit(ds: xr.Dataset, fit) -> xr.Dataset:
    """``ds`` with its fit columns (:func:`fit_metrics`) computed again from ``eigenvalues`` under ``fit``.

    Parameters
    ----------
    ds : xarray.Dataset
        A weight Dataset with ``eigenvalues`` (layer, component, index) (``keep_spectra=True``).
    fit : FitOptions or dict
        The options (:meth:`FitOptions.coerce`); WeightWatcher's skip rules (``min_evals`` ...) are the
        Dataset's own (cells it skipped stay NaN).

    Returns
    -------
    xarray.Dataset
        A copy: the fit columns, their ``nan_reason`` parts, attrs ``fit_<name>`` and each column's
        ``fit_options``, and the ``quality`` labels (same thresholds) follow ``fit``; everything else,
        the spectra included, is unchanged.

    Raises
    ------
    ToolkitError
        No stored spectra, or spectra with dims other than (layer, component, index).
    InvalidOptionError
        ``fit`` is not a FitOptions or a dict of its fields.
    """
    fit = FitOptions.coerce(fit, "toolkit.refit")
    if "eigenvalues" not in ds:
        raise ToolkitError("refitting needs the stored spectra: weight_stats(..., keep_spectra=True)")
    if tuple(ds.eigenvalues.dims) != ("layer", "component", "index"):
        raise ToolkitError(f"refitting reads spectra of dims (layer, component, index), not {ds.eigenvalues.dims}")
    recorded = FitOptions.from_attrs(ds.attrs)
    fit = FitOptions(**{**vars(fit), **{k: getattr(recorded, k) for k in ("min_evals", "max_evals", "max_N")}})
    metrics = fit.apply(fit_metrics(ds))
    values = {m.name: np.array(ds[m.name].values, dtype=np.float64) for m in metrics}  # kept where not refitted
    has_reasons = "nan_reason" in ds.coords
    joined = np.asarray(ds.nan_reason.values, dtype=object).copy() if has_reasons else None
    lam_all = ds.eigenvalues.values
    rows, cols = ds.n_rows.values, ds.n_cols.values
    for i, j in np.ndindex(lam_all.shape[:2]):
        lam = lam_all[i, j][~np.isnan(lam_all[i, j])]
        skipped = rows[i, j] > 0 and fit.skip_reason(int(rows[i, j]), int(cols[i, j]))
        if lam.size == 0 or skipped:
            continue  # no matrix, or one WeightWatcher skips: NaN with the reason it has
        s = torch.from_numpy(np.sqrt(np.clip(np.sort(lam)[::-1], 0.0, None)).copy())
        why_not = _split_reasons(str(joined[i, j])) if has_reasons else {}
        for m in metrics:
            value, why = m.evaluate(None, s)
            values[m.name][i, j] = value
            why_not.pop(m.name, None)
            if math.isnan(value):
                why_not[m.name] = why or "undefined for this matrix"
        if has_reasons:
            joined[i, j] = join_reasons(why_not)
    out = ds.copy()
    out.attrs.update(fit.attrs())
    for m in metrics:
        attrs = {**ds[m.name].attrs, "fit_options": ", ".join(f"{k}={v!r}" for k, v in m.options)}
        out[m.name] = (ds[m.name].dims, values[m.name], attrs)
    if has_reasons:
        out = out.assign_coords(nan_reason=(("layer", "component"), joined.astype(str), ds.nan_reason.attrs))
    if "quality" in ds.coords and "alpha" in out:
        q = ds.quality.attrs
        out = with_quality(out, (q.get("over_trained_below", 2.0), q.get("under_trained_above", 6.0)))
    return out


def _split_reasons(text: str) -> dict:
    """A measured cell's ``nan_reason``, ``"a, b: why; c: other"``, as ``{metric: why}``
    (the inverse of :func:`~toolkit.collect.cells.join_reasons`)."""
    got = {}
    for part in filter(None, (p.strip() for p in text.split("; "))):
        names, _, why = part.partition(": ")
        for name in names.split(", "):
            got[name] = why
    return got
