"""``toolkit.summary``: WeightWatcher's ``get_summary`` means per component and for the whole model,
plus the cells the ``quality`` label flags."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.constraint_types import DataOf
from toolkit.constraints import Names, Optional, checks_options

#: The means WeightWatcher's get_summary reports, in its order, where the Dataset has them.
SUMMARY_METRICS = ("log_norm", "alpha", "alpha_weighted", "log_alpha_norm", "log_spectral_norm", "stable_rank",
                   "mp_softrank")


@dataclass
class Summary:
    """The summary of a weight Dataset.

    Attributes
    ----------
    per_component : pandas.DataFrame
        Index ``component`` (the Dataset's order), one column per metric: the
        mean over layers (NaN cells skipped).
    model : pandas.Series
        The mean over every cell of the model, per metric (WeightWatcher's
        ``get_summary``, which averages over all its layers).
    flagged : pandas.DataFrame
        One row per cell whose ``quality`` is not ``ok`` (columns ``layer``,
        ``component``, ``alpha``, ``quality``), cells the model lacks left out;
        empty without a ``quality`` coordinate.
    """

    per_component: object
    model: object
    flagged: object

    def _repr_html_(self) -> str:
        flagged = (self.flagged.to_html(index=False) if len(self.flagged)
                   else "<p>no cell flagged</p>")
        return ("<h4>whole model (mean over cells)</h4>" + self.model.to_frame("mean").T.to_html()
                + "<h4>per component (mean over layers)</h4>" + self.per_component.to_html()
                + f"<h4>flagged cells ({len(self.flagged)})</h4>" + flagged)

    def __repr__(self) -> str:
        return (f"whole model (mean over cells):\n{self.model.to_string()}\n\nper component (mean over layers):\n"
                f"{self.per_component.to_string()}\n\nflagged cells ({len(self.flagged)}):\n"
                f"{self.flagged.to_string(index=False) if len(self.flagged) else 'none'}")


@checks_options(ds=DataOf(), metrics=Optional(Names("metric names of the Dataset")))
def summary(ds, metrics=None) -> Summary:
    """Means per component and for the whole model, and the flagged cells.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`toolkit.weight_stats` (dims layer, component).
    metrics : sequence of str, optional
        Variables to average; default: those of :data:`SUMMARY_METRICS` that ``ds`` has.

    Returns
    -------
    Summary

    Raises
    ------
    ToolkitError
        ``ds`` has none of the metrics, or a name in ``metrics`` is not a
        (layer, component) variable of it.

    References
    ----------
    Martin, C. H., Peng, T. & Mahoney, M. W. (2021). Predicting trends in the
    quality of state-of-the-art neural networks without access to training or
    testing data. Nature Communications 12, 4122 (the averaged metrics);
    WeightWatcher's ``get_summary``.
    """
    import pandas as pd

    from toolkit.errors import ToolkitError

    names = [m for m in SUMMARY_METRICS if m in ds] if metrics is None else list(metrics)
    bad = [m for m in names if m not in ds or set(ds[m].dims) != {"layer", "component"}]
    if bad or not names:
        raise ToolkitError(f"summary needs (layer, component) metric variables; {bad or 'none of'} "
                           f"{'are not in the Dataset' if bad else list(SUMMARY_METRICS)}: compute them with "
                           "toolkit.weight_stats(...)")
    per_component = pd.DataFrame({m: ds[m].mean("layer", skipna=True).to_series() for m in names})
    model = pd.Series({m: float(ds[m].mean(skipna=True)) for m in names}, name="mean")
    rows = []
    if "quality" in ds.coords:
        for layer in ds.layer.values:
            for comp in ds.component.values:
                cell = ds.sel(layer=layer, component=comp)
                label = str(cell.quality.values)
                if label != "ok" and int(cell.n_rows) > 0:
                    alpha = float(cell.alpha) if "alpha" in ds else float("nan")
                    rows.append({"layer": int(layer), "component": str(comp), "alpha": alpha, "quality": label})
    flagged = pd.DataFrame(rows, columns=["layer", "component", "alpha", "quality"])
    return Summary(per_component, model, flagged)
