"""The ESD figure: one matrix's empirical spectral density with its power-law fit.

WeightWatcher's main picture (Martin & Mahoney 2021): a histogram of the
eigenvalues λ_i = σ_i² of WᵀW on log-log axes (log-spaced bins, density
normalised over all eigenvalues) with the fitted power law
p(λ) ∝ λ^(−α) drawn from ``xmin`` to the largest eigenvalue, scaled to the
fraction of eigenvalues in the tail, and ``xmin`` / ``xmax`` marked.

Drawn from a Dataset's stored ``eigenvalues`` (``weight_stats(...,
keep_spectra=True)``) and the fit it carries (``alpha``, ``alpha_xmin``, which
``keep_spectra`` measures with the spectrum); nothing is computed here. One
cell of a checkpoint is ``toolkit.cell_spectrum(checkpoint, layer=...,
component=...)`` followed by :func:`esd`.

A comparison Dataset (``compare(..., keep_spectra=True)``, its ``eigenvalues``
with attr ``matrix = "update W_target - W_base"``) gives the ESD of the
update ΔW with its fit ``delta_alpha``, ``delta_alpha_xmin``; the title says "update".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from toolkit.constraint_types import Exempt
from toolkit.constraints import OneOf, Optional, Text, Whole, checks_options
from toolkit.plot import _options as O

KINDS = ("loglog", "linear", "logx", "singular_values")
#: The variables holding a kept spectrum's fit ``(alpha, xmin)``: a weight matrix's, an update's (``keep_spectra``
#: measures them with the spectrum).
FIT_VARIABLES = {"weight": ("alpha", "alpha_xmin"), "update": ("delta_alpha", "delta_alpha_xmin")}
#: Colours of the figure (the browser's drill-down uses the same).
BAR_COLOR, BAR_EDGE, FIT_COLOR, XMAX_COLOR = "#9ec3e6", "#1f5fa8", "#c45a00", "#555555"


def number(x: float) -> str:
    """A figure's number: :func:`toolkit.plot._style.format_value`, ``nan`` when undefined."""
    from toolkit.plot._style import format_value

    return format_value(x) if math.isfinite(x) else "nan"


@dataclass
class ESDData:
    """Everything :func:`draw_esd` draws.

    Attributes
    ----------
    eigenvalues : numpy.ndarray
        λ_i, descending, float64 (NaN padding removed).
    alpha, xmin, xmax : float
        The power-law fit (NaN when it could not be made).
    quality : str
        ``over-trained`` / ``under-trained`` / ``ok`` or why there is no fit.
    title : str
    kind : str
    update : bool
        The spectrum is of an update ΔW = W_target − W_base (a comparison Dataset).
    """

    eigenvalues: np.ndarray
    alpha: float
    xmin: float
    xmax: float
    quality: str
    title: str
    kind: str = "loglog"
    update: bool = False

    @property
    def tail_fraction(self) -> float:
        if not math.isfinite(self.xmin):
            return math.nan
        return float(np.mean(self.eigenvalues >= self.xmin))


@dataclass(frozen=True)
class ESDHistogram:
    """The bars of an ESD figure: every positive eigenvalue in exactly one bin.

    Attributes
    ----------
    edges : numpy.ndarray, shape (bins + 1,)
        Ascending. The first edge is the smallest positive eigenvalue and the
        last the largest, exactly (log-spaced in between for a log axis): an
        edge computed as ``10 ** log10(λ_max)`` can round just below λ_max
        and leave it outside every bin.
    counts : numpy.ndarray of int, shape (bins,)
        Eigenvalues per bin (``numpy.histogram``: half-open bins, the last one
        closed, so λ_max is counted in the last).
    density : numpy.ndarray, shape (bins,)
        ``counts / (counted * width)``: integrates to 1 over the bars.
    zeros : int
        Eigenvalues that are 0 (or below): no bar on a log axis; the figure says how many.
    """

    edges: np.ndarray
    counts: np.ndarray
    density: np.ndarray
    zeros: int

    @property
    def counted(self) -> int:
        return int(self.counts.sum())


def esd_histogram(p: ESDData, bins: int = 100) -> ESDHistogram:
    """The bars :func:`draw_esd` draws for ``p`` (``kind`` "loglog" / "logx": log-spaced bins,
    "linear": linear bins from 0), with λ_min and λ_max on the outer edges."""
    lam = np.asarray(p.eigenvalues, dtype=np.float64)
    positive = lam[lam > 0]
    lo, hi = float(positive.min()), float(positive.max())
    if p.kind == "linear":
        edges = np.linspace(0.0, hi, bins + 1)
    elif hi > lo:
        edges = np.logspace(math.log10(lo), math.log10(hi), bins + 1)
        edges[0], edges[-1] = lo, hi  # exactly: the logarithm's round trip can miss either end
    else:  # one distinct value: a bin around it
        edges = np.geomspace(lo / 1.01, lo * 1.01, bins + 1)
    counts, _ = np.histogram(positive, bins=edges)
    with np.errstate(divide="ignore", invalid="ignore"):
        density = np.where(counts > 0, counts / (counts.sum() * np.diff(edges)), 0.0)
    return ESDHistogram(edges, counts, density, int(lam.size - positive.size))


def fit_curve(p: ESDData, points: int = 200):
    """The fitted power law as :func:`draw_esd` draws it: ``(λ, density)`` from ``xmin`` to λ_max,
    scaled to the fraction of eigenvalues in the tail; None without a fit."""
    if not (math.isfinite(p.alpha) and math.isfinite(p.xmin) and p.xmin > 0):
        return None
    x = np.logspace(np.log10(p.xmin), np.log10(p.xmax), points)
    return x, p.tail_fraction * (p.alpha - 1) / p.xmin * (x / p.xmin) ** (-p.alpha)


def _stored(ds, name: str, layer, component) -> float:
    if name not in ds:
        return math.nan
    return float(ds[name].sel(layer=layer, component=component))


@checks_options(ds=O.DS, layer=Whole(), component=Text("a component name, e.g. 'mlp.down'"), kind=OneOf(KINDS),
                checkpoint=Optional(Whole(minimum=0)))
def prepare_esd(ds, *, layer: int, component: str, kind: str = "loglog", checkpoint: int | None = None) -> ESDData:
    """The numbers of one cell's ESD figure, from the Dataset's stored spectrum.

    Parameters
    ----------
    ds : xarray.Dataset
        With ``eigenvalues`` (layer, component, index): ``weight_stats(...,
        keep_spectra=True)``, or ``compare(..., keep_spectra=True)`` (the update's
        spectrum); ``compare_series`` adds ``checkpoint``.
    layer : int
    component : str
    kind : {"loglog", "linear", "logx", "singular_values"}
    checkpoint : int, optional
        The row of a Dataset with a ``checkpoint`` dim (``compare_series``); required there.

    Raises
    ------
    ToolkitError
        No stored spectrum (the message says how to get one), an unknown
        ``kind``, a ``checkpoint`` missing or out of range, or a cell without
        eigenvalues (the model has no such matrix) or with only zeros (an
        unchanged matrix of a comparison).
    """
    from toolkit.errors import ToolkitError
    from toolkit.plot._select import model_name

    if kind not in KINDS:
        raise ToolkitError(f"kind must be one of {KINDS}, got {kind!r}")
    if "eigenvalues" not in ds:
        raise ToolkitError("the Dataset holds no spectra: compute it with toolkit.weight_stats(..., "
                           "keep_spectra=True) (or compare(..., keep_spectra=True)), or one cell's with "
                           "toolkit.cell_spectrum(checkpoint, layer=..., component=...)")
    ds = _one_checkpoint(ds, checkpoint)
    update = str(ds.eigenvalues.attrs.get("matrix", "")).startswith("update")
    lam = np.asarray(ds.eigenvalues.sel(layer=layer, component=component).values, dtype=np.float64)
    lam = lam[~np.isnan(lam)]
    if lam.size == 0:
        raise ToolkitError(f"no eigenvalues for layer {layer} {component}: the model has no such matrix, or its "
                           "spectrum could not be computed (see the nan_reason coordinate)")
    if not (lam > 0).any():
        raise ToolkitError(f"layer {layer} {component}: every eigenvalue is 0 ("
                           f"{'the matrix did not change: dW = 0' if update else 'an all-zero matrix'}), "
                           "nothing to draw")
    fit = FIT_VARIABLES["update" if update else "weight"]
    alpha, xmin = (_stored(ds, name, layer, component) for name in fit)
    quality = _stored_text(ds, "quality", layer, component)
    if not (math.isfinite(alpha) and math.isfinite(xmin)):
        quality = ("no fit: " + _reason(ds, fit[0], layer, component)) if all(n in ds for n in fit) else \
            f"no fit stored (measure {fit[0]} and {fit[1]} with the spectrum)"
    elif not update:
        from toolkit.plot.fit_marks import cell_verdict

        # the heatmap's mark and this title give one verdict: a marked alpha's label is not known
        quality = cell_verdict(ds, layer, component) or quality
    head = model_name(ds.attrs)
    if update:
        title = f"{head + ': ' if head else ''}update ΔW, layer {layer} {component}, α = {number(alpha)}"
    else:
        title = f"{head + ': ' if head else ''}layer {layer} {component}, α = {number(alpha)}" + (
            f" ({quality})" if quality else "")
    return ESDData(lam, alpha, xmin, float(lam.max()), quality, title, kind, update)


def _stored_text(ds, name: str, layer, component) -> str:
    return str(ds[name].sel(layer=layer, component=component).values) if name in ds.variables else ""


def _reason(ds, metric: str, layer, component) -> str:
    """The part of the cell's ``nan_reason`` that names ``metric`` (else the whole reason)."""
    text = _stored_text(ds, "nan_reason", layer, component)
    parts = [p.split(":", 1)[1].strip() for p in text.split(";") if ":" in p and metric in p.split(":", 1)[0]]
    return parts[0] if parts else (text or "undefined")


def _one_checkpoint(ds, checkpoint):
    """``ds`` at ``checkpoint`` when it has that dim (then required), else ``ds``."""
    from toolkit.errors import ToolkitError

    if "checkpoint" not in ds.eigenvalues.dims:
        if checkpoint is not None:
            raise ToolkitError("checkpoint= is for a Dataset with a checkpoint dim (compare_series); this one has none")
        return ds
    n = ds.sizes["checkpoint"]
    if checkpoint is None or isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, np.integer)) \
            or not 0 <= int(checkpoint) < n:
        raise ToolkitError(f"this Dataset has {n} checkpoints: pass checkpoint=0..{n - 1} (a row of the "
                           f"checkpoint dim), got {checkpoint!r}")
    return ds.isel(checkpoint=int(checkpoint))


@checks_options(p=O.PREPARED, ax=O.AX, bins=O.BINS)
def draw_esd(p: ESDData, *, ax=None, bins: int = 100):
    """Draw a prepared :class:`ESDData`; returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4.2))
    lam = p.eigenvalues
    if p.kind == "singular_values":
        s = np.sqrt(np.clip(lam, 0, None))
        ax.plot(np.arange(1, s.size + 1), s, ".-", ms=3, lw=0.8, color="#1f5fa8")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rank i")
        ax.set_ylabel("singular value σ_i of ΔW" if p.update else "singular value σ_i")
        _set_title(ax, p.title)
        return ax
    bars = esd_histogram(p, bins)
    label = "ESD" + (f" ({bars.zeros} zero eigenvalues not drawn)" if bars.zeros and p.kind != "linear" else "")
    ax.hist(bars.edges[:-1], bins=bars.edges, weights=bars.density, color=BAR_COLOR, edgecolor=BAR_EDGE,
            linewidth=0.4, label=label)
    curve = fit_curve(p)
    if curve is not None:
        x, density = curve
        ax.plot(x, density, color=FIT_COLOR, lw=1.8, label=f"power law, α = {number(p.alpha)}")
        ax.axvline(p.xmin, color=FIT_COLOR, ls="--", lw=1, label=f"xmin = {number(p.xmin)}")
    ax.axvline(p.xmax, color=XMAX_COLOR, ls=":", lw=1, label=f"xmax = λ_max = {number(p.xmax)}")
    if p.kind in ("loglog", "logx"):
        ax.set_xscale("log")
    if p.kind == "loglog":
        ax.set_yscale("log")
    ax.set_xlabel("eigenvalue λ of ΔWᵀΔW" if p.update else "eigenvalue λ of WᵀW")
    ax.set_ylabel("density")
    _set_title(ax, p.title)
    ax.legend(fontsize="small", frameon=False)
    return ax


def _set_title(ax, title: str) -> None:
    """``title`` at 10 pt, broken into lines that fit its Axes (ESDs side by side must not overlap)."""
    from toolkit.plot._layout import wrap_title

    ax.set_title(wrap_title(title, ax, fontsize=10), fontsize=10)


@checks_options(data=Exempt("a Dataset with stored spectra, or a checkpoint whose cell cell_spectrum measures (its "
                            "typed errors)"),
                layer=Whole(), component=Text("a component name, e.g. 'mlp.down'"), ax=O.AX,
                kind=OneOf(KINDS), bins=O.BINS, checkpoint=Optional(Whole(minimum=0)))
def esd(data, *, layer: int, component: str, ax=None, kind: str = "loglog", bins: int = 100,
        checkpoint: int | None = None):
    """WeightWatcher's ESD figure of one cell: log-log histogram of λ with the fitted power law.

    Parameters
    ----------
    data : xarray.Dataset
        A Dataset with stored spectra (``weight_stats(..., keep_spectra=True)``,
        ``compare(..., keep_spectra=True)``, or one cell's:
        ``toolkit.cell_spectrum(checkpoint, layer=..., component=...)``).
    layer : int
    component : str
    ax : matplotlib.axes.Axes, optional
    kind : {"loglog", "linear", "logx", "singular_values"}
        ``loglog``: the histogram on log-log axes (log-spaced bins) with the
        fit; ``linear`` / ``logx``: the same on linear or log-x axes;
        ``singular_values``: the rank plot of σ_i.
    bins : int, default 100
    checkpoint : int, optional
        The row of a ``compare_series`` Dataset (its ``checkpoint`` dim).

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    InvalidOptionError
        ``data`` is not a Dataset (a checkpoint: measure the cell first with ``toolkit.cell_spectrum``).
    ToolkitError
        No stored spectrum, an unknown ``kind`` or a cell the model lacks.

    References
    ----------
    Martin, C. H. & Mahoney, M. W. (2021). Implicit self-regularization in
    deep neural networks. JMLR 22(165).

    Examples
    --------
    >>> ds = toolkit.weight_stats(keep_spectra=True)                   # doctest: +SKIP
    >>> toolkit.plot.esd(ds, layer=3, component="mlp.down")            # doctest: +SKIP
    >>> cell = toolkit.cell_spectrum("Qwen/Qwen2.5-7B", layer=3, component="mlp.down")  # doctest: +SKIP
    >>> toolkit.plot.esd(cell, layer=3, component="mlp.down")          # doctest: +SKIP
    """
    import xarray as xr

    if not isinstance(data, xr.Dataset):
        from toolkit.errors import InvalidOptionError

        raise InvalidOptionError("data", data, "an xarray.Dataset with stored spectra; for one cell of a "
                                 "checkpoint: cell = toolkit.cell_spectrum(checkpoint, layer=..., component=...), "
                                 "then toolkit.plot.esd(cell, layer=..., component=...)", "toolkit.plot.esd")
    prepared = prepare_esd(data, layer=layer, component=component, kind=kind, checkpoint=checkpoint)
    return draw_esd(prepared, ax=ax, bins=bins)
