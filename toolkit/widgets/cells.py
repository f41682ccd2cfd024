"""What the explorer says about one cell: hover text, per-cell facts, the top cells, differences.

Plain xarray/numpy, no widgets: every text the browser shows on hover is made
here and tested from Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from toolkit.errors import CheckpointMismatchError, InvalidOptionError
from toolkit.plot._select import is_reduction, select
from toolkit.plot.fit_marks import INTERVALS, interval_columns
from toolkit.plot.numbers import digits_for, format_value

#: Views of two panels' numbers: name -> (symbol, long-name template, units, centre).
COMBINATIONS = {
    "difference": ("−", "{} (target − base)", None, 0.0),
    "ratio": ("/", "{} ratio (target / base)", "1", 1.0),
}


#: The Dataset variables that say how well alpha is determined (:func:`fit_quality_lines`): its 95 % interval
#: (xmin chosen again, the default, or xmin held: :data:`toolkit.plot.fit_marks.INTERVALS`), the tail's size and range.
FIT_FACTS = ("alpha_ci_xmin_lower", "alpha_ci_xmin_upper", "alpha_ci_lower", "alpha_ci_upper", "num_pl_spikes",
             "alpha_xmin", "alpha_xmax")


@dataclass(frozen=True)
class Panel:
    """One heatmap panel of the explorer: where its numbers come from.

    Attributes
    ----------
    label : str
        The model (or checkpoint) it shows.
    ds : xarray.Dataset
        The statistics; for a difference view, the target's.
    selection : dict
        Extra-dimension labels (``checkpoint``, ``expert="mean"`` ...).
    base : tuple or None
        ``(label, ds, selection)`` of the base for a difference or ratio view.
    combine : str
        ``""``, ``"difference"`` or ``"ratio"``.
    """

    label: str
    ds: object
    selection: dict
    base: tuple | None = None
    combine: str = ""


@dataclass(frozen=True)
class Shown:
    """What the explorer draws now: its panels, or why it draws nothing.

    Attributes
    ----------
    panels : list of Panel
        Where each panel's numbers come from (with its full selection).
    prepared : list of toolkit.plot.HeatmapData
        The panels' prepared data; empty while a message is shown.
    facts : list of PanelFacts
        Each panel's per-cell facts (hover texts).
    message : str
        Why nothing is drawn; ``""`` while a figure is shown.
    """

    panels: list = field(default_factory=list)
    prepared: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    message: str = ""

    @property
    def current(self):
        """The (first) panel's prepared data, or None while a message is shown."""
        return self.prepared[0] if self.prepared else None


class PanelFacts:
    """The per-cell facts of one prepared panel, fetched once: tensor names, shapes, and for a
    difference the two sides' values; :meth:`lines` gives one cell's hover text.

    Parameters
    ----------
    panel : Panel
    prepared : toolkit.plot.HeatmapData
    metric : str
        The Dataset variable shown (for a difference, the one both sides hold).
    pending : bool
        A pass is still measuring: an empty cell with no tensor yet is "not measured yet".
    """

    def __init__(self, panel: Panel, prepared, metric: str, *, pending: bool = False):
        self.panel, self.p, self.metric, self.pending = panel, prepared, metric, pending
        self.names = self._grid(panel.ds, "parameter_name", panel.selection)
        self.n_rows = self._grid(panel.ds, "n_rows", panel.selection)
        self.n_cols = self._grid(panel.ds, "n_cols", panel.selection)
        self.fit = self._fit_facts(panel) if metric == "alpha" and not panel.combine else None
        self.sides = None
        if panel.combine:
            b_label, b_ds, b_sel = panel.base
            self.sides = ((b_label, self._values(b_ds, b_sel)), (panel.label, self._values(panel.ds, panel.selection)))
            self.side_digits = digits_for(np.concatenate([v.ravel() for _, v in self.sides]))

    def _aligned(self, da, selection):
        """``da`` after ``selection``, on the panel's rows and columns, as a (layer, col) array or None."""
        p = self.p
        sel = {}
        for key, value in selection.items():
            if is_reduction(da, key, value):
                continue
            if key in da.dims or (key in da.coords and da[key].ndim == 1 and da[key].dims[0] in da.dims):
                sel[key] = value
        try:
            da = select(da, sel)
            if set(da.dims) != {"layer", p.col_dim}:
                return None
            return da.sel(layer=list(p.rows), **{p.col_dim: list(p.cols)}).transpose("layer", p.col_dim).values
        except (KeyError, ValueError):
            return None

    def _grid(self, ds, name, selection):
        return self._aligned(ds.coords[name], selection) if name in ds.coords else None

    def _fit_facts(self, panel) -> dict:
        """alpha's fit quality on the panel's grid, from what the Dataset holds: the 95 % interval
        (:data:`FIT_FACTS`), the tail's eigenvalue count and its range λmax / xmin."""
        return {name: got for name in FIT_FACTS
                if name in panel.ds and (got := self._aligned(panel.ds[name], panel.selection)) is not None}

    def _fit_lines(self, i: int, j: int) -> list[str]:
        """The hover lines of alpha's fit quality at cell (i, j) (none where the Dataset holds none)."""
        from toolkit.plot.fit_marks import uncertain_reason

        facts = {name: float(v[i, j]) for name, v in self.fit.items()}
        verdict = uncertain_reason(float(self.p.values[i, j]), facts, max_relative_width=self.p.mark_width)
        return fit_quality_lines(facts, self.p.digits) + ([verdict] if verdict else [])

    def _values(self, ds, selection):
        got = self._aligned(ds[self.metric], selection)
        return got if got is not None else np.full(self.p.values.shape, np.nan)

    def lines(self, i: int, j: int) -> list[str]:
        """The hover text of cell (row ``i``, column ``j``), as lines.

        Layer and column; the value (for a difference: both sides as well);
        the tensor name (``parameter_name``) and shape (``n_rows`` x
        ``n_cols``); why the value is undefined when it is NaN.
        """
        p = self.p
        value = float(p.values[i, j])
        column = p.col_labels[j] if p.col_dim == "component" else f"{p.col_dim} {p.col_labels[j]}"
        lines = [f"layer {p.rows[i]}, {column}", f"{p.long_name}: {_value_text(value, p.digits)}"]
        if self.sides is not None:
            lines.append("; ".join(f"{label}: {_value_text(float(v[i, j]), self.side_digits)}"
                                   for label, v in self.sides))
        of_module = module_side(self.panel.ds, self.metric)
        if of_module:  # an activation statistic: the module's output (or input), not its weight
            if self.names is not None and str(self.names[i, j]):
                lines.append(f"module: {str(self.names[i, j]).removesuffix('.weight')} ({of_module})")
        else:
            if self.names is not None and str(self.names[i, j]):
                lines.append(f"tensor: {self.names[i, j]}")
            if self.n_rows is not None and self.n_cols is not None and int(self.n_rows[i, j]) > 0:
                lines.append(f"shape: {int(self.n_rows[i, j])} × {int(self.n_cols[i, j])}")
        if self.fit and np.isfinite(value):
            lines.extend(self._fit_lines(i, j))
        if np.isnan(value):
            reason = str(p.reasons[i, j]) if p.reasons is not None else ""
            if not reason and self.sides is not None and self.panel.combine == "ratio" and self.sides[0][1][i, j] == 0:
                reason = "the base is 0: no ratio"
            lines.append("undefined: " + (reason or self._unrecorded_reason(i, j, column)))
        return lines

    def _unrecorded_reason(self, i: int, j: int, column: str) -> str:
        """Why a NaN cell has no value when the Dataset records no reason: no matrix there (no tensor
        name, no shape), not measured yet (a pass still running), or a value left NaN."""
        no_tensor = self.names is not None and not str(self.names[i, j])
        no_shape = self.n_rows is not None and int(self.n_rows[i, j]) == 0
        if self.pending and (no_tensor or self.names is None):
            return "not measured yet (the pass is still running)"
        if self.p.col_dim == "component" and (no_tensor or (self.names is None and no_shape)):
            return f"no {column} matrix in this layer of the model"
        return f"{self.p.long_name} is NaN for this matrix and the Dataset records no reason"

    def grid(self) -> list[list[str]]:
        """``grid[row][col]``: the hover text of every cell, row 0 = the lowest layer."""
        n_rows, n_cols = self.p.values.shape
        return [["\n".join(self.lines(i, j)) for j in range(n_cols)] for i in range(n_rows)]


#: Statistics of an activation Dataset that are of the weight (the rest are of the module's input or output).
WEIGHT_SIDE = ("gradient_norm",)


def module_side(ds, metric: str) -> str:
    """``"its output"`` or ``"its input"`` for an activation statistic (``ds.attrs["kind"] ==
    "activations"``), whose hover names the module rather than the weight tensor and its shape; ``""``
    for a weight statistic (or ``gradient_norm``, dL/dW)."""
    if not is_activations(ds) or metric in WEIGHT_SIDE:
        return ""
    return "its input" if metric.startswith("input_") else "its output"


def is_activations(ds) -> bool:
    """``ds`` is an activation Dataset (:func:`toolkit.activations.activation_stats`)."""
    return str(getattr(ds, "attrs", {}).get("kind", "")) == "activations"


def fit_quality_lines(facts: dict, digits: int = 3) -> list[str]:
    """alpha's fit quality as text lines, from the facts a cell has.

    Parameters
    ----------
    facts : dict of str -> float
        Any of an interval's two ends (the 95 % interval: :func:`toolkit.plot.fit_marks.interval_columns`),
        ``num_pl_spikes`` (the tail's eigenvalue count), ``alpha_xmin`` and ``alpha_xmax`` (the tail's range).
    digits : int, default 3
        Significant digits of the interval's ends.

    Returns
    -------
    list of str
        ``"95 % interval: lo to hi"`` and ``"tail: n eigenvalues, range λmax / xmin = r"`` where
        the facts are there and finite.
    """
    out, tail = [], []
    pair = interval_columns(facts) or INTERVALS[0]
    lo, hi = facts.get(pair[0], np.nan), facts.get(pair[1], np.nan)
    if np.isfinite(lo) and np.isfinite(hi):
        out.append(f"95 % interval: {_value_text(lo, digits)} to {_value_text(hi, digits)}")
    if np.isfinite(facts.get("num_pl_spikes", np.nan)):
        tail.append(f"{int(facts['num_pl_spikes'])} eigenvalues")
    xmin, xmax = facts.get("alpha_xmin", np.nan), facts.get("alpha_xmax", np.nan)
    if xmin > 0 and np.isfinite(xmax):
        tail.append(f"range λmax / xmin = {_value_text(xmax / xmin, 3)}")
    if tail:
        out.append("tail: " + ", ".join(tail))
    return out


def _value_text(v: float, digits: int = 3) -> str:
    return "NaN" if v is None or np.isnan(v) else format_value(v, digits)


def combined(target_da, base_da, how: str, *, col_dim: str, target: str = "target", base: str = "base"):
    """``target − base`` or ``target / base`` of two 2-D (layer, column) panels on the same grid.

    Parameters
    ----------
    target_da, base_da : xarray.DataArray
        Dims ``(layer, col_dim)``, after the panel's selection.
    how : {"difference", "ratio"}
    col_dim : str
    target, base : str
        Labels for the result's ``long_name``.

    Returns
    -------
    xarray.DataArray
        Same dims; attrs ``long_name`` (``"Stable rank (target − base)"``) and
        ``units`` (the metric's for a difference, "1" for a ratio). A ratio
        with a zero base is NaN.

    Raises
    ------
    toolkit.errors.CheckpointMismatchError
        The layers or columns differ (the grids do not line up).
    """
    for dim in ("layer", col_dim):
        a, b = target_da[dim].values.tolist(), base_da[dim].values.tolist()
        if a != b:
            raise CheckpointMismatchError(
                dim, _span(b), _span(a), f"the grids do not line up ({base} vs {target}); the {how} view needs "
                "the same layers and columns, side by side shows any two")
    _, template, units, _ = COMBINATIONS[how]
    t, b = target_da.astype(float), base_da.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = t - b.values if how == "difference" else (t / b.values).where(b.values != 0)
    long_name = str(target_da.attrs.get("long_name") or target_da.name or "value")
    out.attrs = {"long_name": template.format(long_name),
                 "units": units if units is not None else str(target_da.attrs.get("units", ""))}
    out.name = f"{target_da.name}_{how}"
    return out


def unique_labels(labels, count: int, where: str) -> list[str]:
    """``labels``, one per Dataset (a str: the one label of one Dataset), made unique: a label seen before gets
    `` (2)``, `` (3)`` ... (the first number no other label holds, so ``["x", "x (2)", "x"]`` gives ``x (3)`` to
    the third).

    Raises
    ------
    toolkit.errors.InvalidOptionError
        Not one label per Dataset.
    """
    labels = [labels] if isinstance(labels, str) else list(labels)  # not one label per character
    if len(labels) != count:
        raise InvalidOptionError("labels", labels, f"one label per Dataset ({count} of them)", where)
    out: list[str] = []
    for lab in labels:
        name, n = lab, 1
        while name in out:
            n += 1
            name = f"{lab} ({n})"
        out.append(name)
    return out


def _span(values) -> str:
    return f"{len(values)} entries ({values[0]} .. {values[-1]})" if values else "none"


def top_cells(prepared, k: int = 5, *, lowest: bool = False, label: str = "") -> list[tuple]:
    """The ``k`` highest (or lowest) cells of a prepared panel: ``(label, layer, column, value)``.

    NaN cells are left out; ties keep the layer order.
    """
    v = prepared.values
    finite = np.argwhere(~np.isnan(v))
    order = sorted(finite.tolist(), key=lambda ij: (v[ij[0], ij[1]] if lowest else -v[ij[0], ij[1]], ij[0], ij[1]))
    return [(label, prepared.rows[i], prepared.col_labels[j], float(v[i, j])) for i, j in order[:k]]
