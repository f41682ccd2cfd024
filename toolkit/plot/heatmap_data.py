"""What one heatmap panel is before it is drawn: :class:`HeatmapData`, plain numbers and labels.

:func:`toolkit.plot.prepare_heatmap` makes one; :func:`toolkit.plot.draw_heatmap`
(matplotlib) and the explorer's page (:mod:`toolkit.widgets.heatmap_spec`) draw it,
with one norm, one set of colours and one way of printing its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from toolkit.plot import _style
from toolkit.plot.numbers import format_value


@dataclass(frozen=True)
class HeatmapData:
    """Everything needed to draw one heatmap panel, without matplotlib.

    Attributes
    ----------
    values : numpy.ndarray, shape (n_layers, n_cols), float64
        The metric. Row ``i`` is layer ``rows[i]``; rows ascend, so row 0 is
        the first layer shown and is drawn at the *bottom*, the last row at
        the top. NaN where the model lacks the matrix.
    rows : tuple of int
        Layer numbers of the rows (ascending).
    cols : tuple
        Coordinate values of the columns (components in canonical order,
        query heads or key/value heads).
    col_dim : {"component", "head", "kv_head"}
        The dimension along the columns (see :attr:`col_axis_label`).
    col_labels : tuple of str
        Column labels as printed (``attn.q`` ...).
    yticks, ytick_labels : tuple
        Row positions that carry a label (every 4th layer and the last) and
        those labels.
    metric, long_name, units : str
        The variable's name and its ``long_name`` / ``units`` attrs.
    scale : {"diverging", "sequential", "log"}
        The scale drawn (``"auto"`` resolved: :func:`toolkit.plot.scales.resolve_scale`).
    vmin, vmax : float
        Colour limits (values outside are drawn with the end colours);
        robust percentiles, or the data's min and max with ``robust=False``.
    center : float or None
        Value drawn white (diverging scale only).
    cbar_ticks : tuple of float
        Three to five colorbar ticks.
    cbar_label, title : str
        The colorbar's label says what the colours are: the variable, its units and the
        scale (``log scale``, ``linear scale``, ``white = median 0.0912``, ``white = 0``).
    extend : {"neither", "min", "max", "both"}
        Whether values fall outside ``[vmin, vmax]`` (the colorbar then
        gets an arrow at that end: the limits clip).
    selection : dict
        Labels chosen for the extra dimensions (``{"checkpoint": ...}``).
    reasons : numpy.ndarray of str or None
        Like ``values``: why a cell is NaN, this metric's part of the
        ``nan_reason`` coordinate ("" where none is stored).
    caption : str
        A note drawn under the panel: ``"constant: 0"`` when every value is
        the same, or why the metric is undefined when no cell has a value
        (the cells are then all hatched).
    constant : float or None
        The value of a constant panel (painted in one colour: the palest of a
        sequential map; one colorbar tick).
    log : bool
        A diverging scale in decades (the limits are symmetric about the
        centre in log space; :func:`toolkit.plot.scales.diverging_log`).
    digits : int
        Significant digits of every label of the panel (ticks, hover, cells,
        top cells): :func:`toolkit.plot.numbers.digits_for`, so they tell
        the values apart.
    span : (float, float)
        The part of the colour map drawn between ``vmin`` and ``vmax``: all of
        it, unless a diverging bar is cut at its metric's bound
        (:func:`toolkit.plot.scale_rules.bounded_diverging`) or the panel is
        one value (:func:`~toolkit.plot.scale_rules.constant_limits`: one colour).
    marks : numpy.ndarray of bool or None
        Like ``values``: the cells drawn with the mark of an uncertain alpha
        (:func:`toolkit.plot.fit_marks.uncertain_alpha`); None where the panel
        has no such facts.
    mark_width : float
        The stated limit of the marks: alpha's 95 % interval wider than this
        fraction of alpha (:data:`toolkit.plot.fit_marks.MAX_RELATIVE_WIDTH` by default).
    """

    values: np.ndarray
    rows: tuple
    cols: tuple
    col_dim: str
    col_labels: tuple
    yticks: tuple
    ytick_labels: tuple
    metric: str
    long_name: str
    units: str
    scale: str
    vmin: float
    vmax: float
    center: float | None
    cbar_ticks: tuple
    cbar_label: str
    title: str
    extend: str = "neither"
    selection: dict = field(default_factory=dict)
    reasons: np.ndarray | None = None
    caption: str = ""
    constant: float | None = None
    log: bool = False
    digits: int = 3
    marks: np.ndarray | None = None
    span: tuple = (0.0, 1.0)
    mark_width: float = 0.5

    @property
    def nan_mask(self) -> np.ndarray:
        """Boolean array like ``values``, True where there is no value (NaN).

        +-inf (e.g. the condition number of a rank-deficient matrix) is a
        value: it is drawn with the colour beyond ``vmax`` (``vmin``).
        """
        return np.isnan(self.values)

    @property
    def col_axis_label(self) -> str:
        """The x axis label: the column dimension's name (``head``, ``kv_head``).

        Empty for components, whose tick labels (``attn.q`` ...) say it all.
        """
        return "" if self.col_dim == "component" else str(self.col_dim)

    @property
    def notes(self) -> list[str]:
        """What the x axis label says under the panel: the column dimension (``head``), that hatched
        cells have no value, what the mark of an uncertain alpha means (when a cell has it), and the
        ``caption``."""
        from toolkit.plot.fit_marks import mark_note

        mask = self.nan_mask
        notes = [self.col_axis_label] if self.col_axis_label else []
        if mask.any() and not mask.all():
            notes.append("hatched: no value (NaN)")
        if self.marks is not None and self.marks.any():
            notes.append(mark_note(max_relative_width=self.mark_width))
        if self.caption:
            notes.append(self.caption)
        return notes

    @property
    def clipped(self) -> bool:
        """True when some values lie outside the colour limits (see ``extend``)."""
        return self.extend != "neither"

    def norm(self):
        """The matplotlib norm of this panel (see :func:`toolkit.plot._style.make_norm`)."""
        return _style.make_norm(self.scale, self.vmin, self.vmax, self.center, log=self.log)

    def colormap(self):
        """The matplotlib colour map of this panel: its scale's, over :attr:`span`."""
        return _style.cmap(self.scale, self.span)

    def drawn_values(self) -> np.ndarray:
        """``values`` as the colour map receives them: masked where NaN; +-inf as huge finite
        numbers (the colours beyond the limits); on the log scale values <= 0 below ``vmin``."""
        big = np.finfo(np.float64).max / 1e6
        shown = np.nan_to_num(self.values, nan=np.nan, posinf=big, neginf=-big)
        if self.scale == "log" or self.log:  # values <= 0 have no logarithm: the "under" colour
            shown = np.where(shown <= 0, self.vmin * 1e-3, shown)
        return np.ma.masked_invalid(shown)

    def face_colors(self) -> np.ndarray:
        """RGBA of every cell, shape (n_rows, n_cols, 4), in [0, 1]: the colours
        :func:`draw_heatmap` paints (alpha 0 where there is no value: drawn hatched)."""
        return np.asarray(self.colormap()(self.norm()(self.drawn_values())), dtype=float)

    def format(self, value: float) -> str:
        """``value`` as every label of this panel prints it (:attr:`digits` significant digits)."""
        return format_value(value, self.digits)

    def tick_labels(self) -> list[str]:
        """The colorbar's tick labels, in one notation, with :attr:`digits` digits."""
        return _style.format_ticks(self.cbar_ticks, "log" if self.log else self.scale, self.digits)

    def colorbar(self, n: int = 33) -> dict:
        """The colorbar as plain numbers: ``colors`` (``n`` RGBA samples from its bottom to its top,
        evenly spaced along the bar), ``ticks`` (``(position in [0, 1], label)``: where
        matplotlib's colorbar puts each tick, the norm of its value), ``label``, ``extend``."""
        cm, norm = self.colormap(), self.norm()
        labels = self.tick_labels()
        positions = [float(np.clip(norm(t), 0.0, 1.0)) for t in self.cbar_ticks]
        if self.constant is not None:  # one colour: its one tick in the middle
            labels, positions = [f"constant: {label}" for label in labels], [0.5] * len(labels)
        return {"colors": [list(map(float, cm(x))) for x in np.linspace(0.0, 1.0, n)],
                "ticks": list(zip(positions, labels, strict=True)), "label": self.cbar_label,
                "extend": self.extend}
