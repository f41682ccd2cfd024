"""Where each activation's attention norm lands, across lab runs with different N.

:func:`level_table` reduces lab results (one per preset: N = 17, N = 65, ...) to
one row per (run, activation) at a common epoch: the attention norm (mean over
layers), its largest value anywhere in the run, √N, and the scale of the scores
that decides where a polynomial lands; :func:`levels_figure` draws it. Notebook
04's section "What sets the level of each curve" is built on the two.
"""

from __future__ import annotations

import math

import numpy as np

from toolkit.errors import EmptyInputError
from toolkit.plot.layer_grid_figure import series_colors

#: Columns of :func:`level_table`, in order.
COLUMNS = ("N", "sqrt_N", "epoch", "attention_norm", "attention_norm_max", "score_mean_abs",
           "score_p99_abs", "score_fraction_above_1")


def _common_epoch(runs: dict, epoch: int | None) -> int:
    done = min(int(ds["completed_epochs"].min()) for ds in runs.values())
    if epoch is None:
        return done
    if not 0 <= int(epoch) <= done:
        raise EmptyInputError(f"epoch {epoch} is not recorded in every run; they share epochs 0..{done}")
    return int(epoch)


def level_table(runs: dict, *, epoch: int | None = None):
    """One row per (run, activation): norms and score scale at a common epoch.

    Parameters
    ----------
    runs : dict of str -> xarray.Dataset
        Lab results (:func:`toolkit.lab.load_result`) by a name of your choice
        (``{"N = 17": ds17, "N = 65": ds65}``), each with attr ``num_tokens``.
    epoch : int, optional
        Epoch compared; default the last one every activation of every run completed.

    Returns
    -------
    pandas.DataFrame
        Index (run, activation); columns :data:`COLUMNS`: ``N`` and ``sqrt_N``
        (√N, softmax's ceiling); ``epoch``; ``attention_norm``, the mean over
        layers at ``epoch``; ``attention_norm_max``, the largest norm of any
        image, head and layer at any epoch up to ``epoch``; and the means over
        layers at ``epoch`` of ``score_mean_abs``, ``score_p99_abs`` and
        ``score_fraction_above_1`` (NaN for a run recorded before them).

    Raises
    ------
    EmptyInputError
        No run, or an epoch some run has not reached.
    """
    import pandas as pd

    if not runs:
        raise EmptyInputError("no lab run given; pass {name: dataset}")
    at = _common_epoch(runs, epoch)
    rows, index = [], []
    for name, ds in runs.items():
        n = int(ds.attrs["num_tokens"])
        final = ds.sel(epoch=at)
        for label in ds["activation"].values.tolist():
            one = final.sel(activation=label)
            peak = ds["attention_norm_max"].sel(activation=label, epoch=slice(0, at))
            scores = [float(one[k].mean("layer")) if k in one else math.nan for k in COLUMNS[5:]]
            rows.append([n, math.sqrt(n), at, float(one["attention_norm"].mean("layer")), float(peak.max()),
                         *scores])
            index.append((str(name), str(label)))
    return pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=["run", "activation"]),
                        columns=list(COLUMNS))


def levels_figure(table, *, fig=None, figsize=(6.4, 4.0)):
    """Each activation's attention norm per run on a log axis, with √N marked.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`level_table`.
    fig : matplotlib.figure.Figure, optional
        An empty figure to draw on; default a new pyplot figure.
    figsize : (float, float)
        Size of the new figure.

    Returns
    -------
    matplotlib.figure.Figure
        Runs on x (in the table's order), one line per activation through its
        mean-over-layers norm, a grey dashed bar at √N per run and hollow markers at
        each softmax run's largest norm (never above the bar).
    """
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=figsize, layout="constrained")
    ax = fig.subplots()
    runs = list(dict.fromkeys(table.index.get_level_values("run")))
    labels = list(dict.fromkeys(table.index.get_level_values("activation")))
    x = np.arange(len(runs))
    for label, color in zip(labels, series_colors(labels, labels), strict=True):
        y = [table.loc[(r, label), "attention_norm"] if (r, label) in table.index else np.nan for r in runs]
        ax.plot(x, y, "o-", color=color, label=label, lw=1.4)
        if label == "softmax":
            peak = [table.loc[(r, label), "attention_norm_max"] for r in runs]
            ax.plot(x, peak, "o", mfc="none", color=color, label="softmax, largest single image")
    bound = [table.xs(r, level="run")["sqrt_N"].iloc[0] for r in runs]
    ax.hlines(bound, x - 0.3, x + 0.3, color="0.55", ls="--", lw=2.0, label="√N (softmax's ceiling)")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{r}\n(√N = {b:.2f})" for r, b in zip(runs, bound, strict=True)])
    ax.set_xlim(-0.5, len(runs) - 0.5)
    ax.set_ylabel("attention norm, mean over layers")
    ax.set_title(f"Where each activation lands (epoch {int(table['epoch'].iloc[0])})", fontsize="medium")
    ax.grid(True, which="major", axis="y", alpha=0.3)
    fig.legend(loc="outside right upper", frameon=False, fontsize="small")
    return fig
