"""The answers to notebook 04's lesson questions, computed from a lab result (never typed by hand).

Each question is one the lab explorer (:func:`toolkit.widgets.lab_explorer`) answers by looking; the
functions here read the same numbers from the Dataset, so the answer notes stay true for any run
(the committed one, or a run of your own with the same variables).
"""

from __future__ import annotations

import math

import numpy as np


def _sqrt_n(ds) -> float:
    return math.sqrt(float(ds.attrs["num_tokens"]))


def ranking(ds, metric: str = "attention_norm", *, layer: int | None = None, epoch: int = -1) -> list[tuple]:
    """Activations ordered by ``metric`` at one epoch, highest first.

    Parameters
    ----------
    ds : xarray.Dataset
        A lab result (:func:`toolkit.lab.load_result`).
    metric : str
        A variable with dims (activation, epoch[, layer]); a ``head`` dim is averaged (as the
        explorer's default).
    layer : int, optional
        0-based; needed for a per-layer variable.
    epoch : int
        Position along ``epoch`` (default the last).

    Returns
    -------
    list of (str, float)
        (activation label, value), highest value first.
    """
    da = ds[metric].isel(epoch=epoch)
    if "head" in da.dims:
        da = da.mean("head")
    if "layer" in da.dims:
        da = da.sel(layer=layer)
    pairs = [(str(a), float(da.sel(activation=a))) for a in ds["activation"].values]
    return sorted(pairs, key=lambda p: -p[1])


def peak(ds, activation: str, metric: str = "attention_norm_max", *, head: str = "max") -> tuple[float, int, int]:
    """The largest value of a variable for one activation, and where: over every epoch and layer.

    Parameters
    ----------
    ds : xarray.Dataset
    activation : str
    metric : str
        Default ``attention_norm_max`` (the largest image's norm per head).
    head : {"max", "mean"}
        How a ``head`` dim is reduced, as the explorer's head menu does (default max over heads).

    Returns
    -------
    (value, epoch, layer)
    """
    da = ds[metric].sel(activation=activation)
    if "head" in da.dims:
        da = getattr(da, head)("head")
    values = da.transpose("epoch", "layer").values
    e, layer = np.unravel_index(np.nanargmax(values), values.shape)
    return float(values[e, layer]), int(ds["epoch"].values[e]), int(ds["layer"].values[layer])


def first_crossing(ds, activation: str, level: float | None = None, metric: str = "attention_norm_max"):
    """The first epoch at which any layer's largest head goes above ``level`` (default √N).

    Parameters
    ----------
    ds : xarray.Dataset
    activation : str
    level : float, optional
        Default √N (``ds.attrs["num_tokens"]``), softmax's ceiling.
    metric : str
        Default ``attention_norm_max``, max over heads (the explorer's *max over heads*).

    Returns
    -------
    (epoch, layers) or None
        The epoch and the layers (0-based) above ``level`` then; None if it never crosses.
    """
    level = _sqrt_n(ds) if level is None else level
    da = ds[metric].sel(activation=activation)
    if "head" in da.dims:
        da = da.max("head")
    above = (da > level).transpose("epoch", "layer").values
    hits = np.flatnonzero(above.any(axis=1))
    if not hits.size:
        return None
    e = int(hits[0])
    return int(ds["epoch"].values[e]), [int(x) for x in ds["layer"].values[above[e]]]


def _crossing_text(activation: str, epoch: int, layers: list, depth: int) -> str:
    where = "every layer" if len(layers) == depth else ("layer " if len(layers) == 1 else "layers ") + ", ".join(
        map(str, layers))
    when = "already above at epoch 0, before any training" if epoch == 0 else f"first above at epoch {epoch}"
    return f"{activation} {when} ({where})"


def answer_notes(ds) -> dict[str, str]:
    """The answer note of each lesson question (``"q1"`` ... ``"q4"``), with the numbers of ``ds``.

    Parameters
    ----------
    ds : xarray.Dataset
        A lab result with the paper's five activations.

    Returns
    -------
    dict of str -> str
        Plain sentences: q1 the order at the last layer and epoch; q2 how high softmax's mean
        norm gets; q3 softmax's largest head against √N and which polynomial crosses √N first;
        q4 the final test accuracies.
    """
    last, sqrt_n = int(ds["epoch"].values[-1]), _sqrt_n(ds)
    top_layer = int(ds["layer"].values[-1])
    order = ranking(ds, layer=top_layer)
    q1 = (f"At epoch {last}, layer {top_layer}: " + " > ".join(f"{a} ({v:.2f})" for a, v in order)
          + f". Highest: {order[0][0]}; lowest: {order[-1][0]}.")
    mean_peak, mean_epoch, mean_layer = peak(ds, "softmax", "attention_norm", head="mean")
    q2 = (f"{'No' if mean_peak <= sqrt_n else 'Yes'}. Softmax's attention norm (mean over heads and images) is "
          f"at most {mean_peak:.2f}, in layer {mean_layer} at epoch {mean_epoch}; √N = {sqrt_n:.2f}"
          + (": the heads use little of the room." if mean_peak < sqrt_n / 2 else "."))
    soft, soft_epoch, soft_layer = peak(ds, "softmax")
    crossings = {str(a): first_crossing(ds, str(a)) for a in ds["activation"].values if a != "softmax"}
    crossed = sorted(((c[0], a, c[1]) for a, c in crossings.items() if c), key=lambda t: t[0])
    never = [a for a, c in crossings.items() if c is None]
    q3 = (f"Softmax's largest head reaches {soft:.2f} (layer {soft_layer}, epoch {soft_epoch}), "
          + (f"under √N = {sqrt_n:.2f}, and never above it. " if soft <= sqrt_n else f"above √N = {sqrt_n:.2f}. ")
          + "; ".join(_crossing_text(a, e, layers, ds.sizes["layer"]) for e, a, layers in crossed)
          + (f". Never above √N: {', '.join(never)}." if never else "."))
    acc = ranking(ds, "test_accuracy")
    q4 = (f"After {last} epochs: " + ", ".join(f"{a} {100 * v:.1f} %" for a, v in acc)
          + f". The spread is {100 * (acc[0][1] - acc[-1][1]):.1f} points; a few fast epochs cannot show it.")
    return {"q1": q1, "q2": q2, "q3": q3, "q4": q4}
