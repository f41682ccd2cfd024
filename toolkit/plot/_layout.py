"""Sizes and texts of a heatmap's layout, and the per-cell reasons it shows (no matplotlib import)."""

from __future__ import annotations

import numpy as np

from toolkit.plot._select import reason_for

#: Cell size (inches) below which printed values would be unreadable, and the size given to a
#: figure drawn with values in its cells (7 pt digits fit a 0.26 in row and a 0.74 in column).
ANNOTATED_CELL = (0.74, 0.26)
MIN_VALUE_FONT = 5.5  # points


#: How a dimensionless variable's ``units`` attr may read (CF's "1", and what other tools write).
DIMENSIONLESS = ("1", "1.0", "[1]", "dimensionless", "-")


def is_dimensionless(units) -> bool:
    """Whether a ``units`` attr means "no unit" (``"1"``, ``"[1]"``, ``"dimensionless"`` ...)."""
    return str(units).strip().lower() in DIMENSIONLESS


def unit_text(units) -> str:
    """What a colour-bar label adds for ``units``: ``" (dimensionless)"``, ``" [V]"``, or nothing; never
    ``"[1]"``."""
    units = str(units or "").strip()
    if not units:
        return ""
    return " (dimensionless)" if is_dimensionless(units) else f" [{units}]"


def auto_figsize(n_rows: int, n_cols: int, *, annotate: bool = False) -> tuple[float, float]:
    """A figure size (inches) that keeps cells readable: about 0.17 in per layer.

    With ``annotate`` the cells grow to :data:`ANNOTATED_CELL`, so the values
    printed in them stay legible at 30 layers and more.
    """
    if annotate:
        w, h = ANNOTATED_CELL
        return (max(4.5, w * n_cols + 2.8), max(3.6, h * n_rows + 1.9))
    return (max(4.0, 0.62 * n_cols + 2.6), max(3.6, 0.17 * n_rows + 1.7))


def value_font_size(ax, n_rows: int, n_cols: int) -> float:
    """Font size (points) for values printed in the cells of ``ax``: 55 % of a row's height, at most
    9 pt, and narrow enough for five characters in a column."""
    fig_w, fig_h = ax.figure.get_size_inches()
    box = ax.get_position()
    cell_h = fig_h * box.height * 72 / max(n_rows, 1)
    cell_w = fig_w * box.width * 72 / max(n_cols, 1)
    return float(min(9.0, 0.55 * cell_h, cell_w / 3.2))


def wrap_title(title: str, ax, fontsize: float = 10) -> str:
    """``title`` broken into lines that fit the width of ``ax``'s figure (about 0.55 em per character)."""
    import textwrap

    share = 1.0
    spec = ax.get_subplotspec()
    if spec is not None:  # one panel of several: its share of the width (0.775 = matplotlib's usable width)
        share = min(1.0, spec.get_position(ax.figure).width / 0.775)
    width_pt = ax.figure.get_size_inches()[0] * 72 * 0.92 * share
    chars = max(12, int(width_pt / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars, break_on_hyphens=False)) or title


def cell_reasons(da, metric: str) -> np.ndarray:
    """Per-cell reason (str array like the values) from a ``nan_reason`` coordinate; "" where none."""
    shape = da.shape
    if "nan_reason" not in da.coords:
        return np.full(shape, "", dtype=object)
    coord = da.coords["nan_reason"]
    coord = coord.broadcast_like(da).transpose(*da.dims) if set(coord.dims) <= set(da.dims) else None
    if coord is None:
        return np.full(shape, "", dtype=object)
    out = np.asarray([reason_for(r, metric) for r in np.asarray(coord.values, dtype=str).ravel()], dtype=object)
    return out.reshape(shape)


def most_common(texts) -> str:
    """The most frequent of ``texts`` ("" for none)."""
    texts = [str(t) for t in np.asarray(texts).ravel()]
    return max(set(texts), key=texts.count) if texts else ""


def fit_ylabels(fig, *, tries: int = 4) -> None:
    """Break every y label of ``fig`` into lines until it is no taller than its Axes.

    A long label ("largest attention norm per head") on a short panel ran past the panel's top and
    bottom. Label and Axes are measured after the figure's layout, and a label too tall is wrapped
    between words to the share of its longest line that fits; then measured again, up to ``tries``
    times (the layout moves when a label takes another line). A single word longer than its Axes
    stays as it is. Labels surely shorter than their Axes (under 0.7 of their slot) are not measured.
    """
    import textwrap

    def surely_short(ax) -> bool:  # no layout needed: a label under 0.7 of its slot's height (a wide guess of
        label = ax.yaxis.label  # 0.62 em a character) fits whatever the layout takes off the slot
        longest = max((len(line) for line in label.get_text().split("\n")), default=0)
        slot = ax.get_position().height * fig.get_size_inches()[1] * 72
        return longest * 0.62 * label.get_fontsize() <= 0.7 * slot

    if all(surely_short(ax) for ax in fig.axes):
        return  # a layout costs as much as drawing the figure (1.5 s for the lab's 12 panels)
    for _ in range(tries):
        fig.draw_without_rendering()
        changed = False
        for ax in fig.axes:
            label = ax.yaxis.label
            text = label.get_text()
            if not ax.get_visible() or not text:
                continue
            tall, room = label.get_window_extent().height, ax.get_window_extent().height
            if tall <= room:
                continue
            longest = max(len(line) for line in text.split("\n"))
            chars = min(longest - 1, int(longest * room / tall * 0.95))
            wrapped = "\n".join(textwrap.wrap(" ".join(text.split()), max(chars, 1), break_on_hyphens=False,
                                                   break_long_words=False))
            if wrapped and wrapped != text:
                label.set_text(wrapped)
                changed = True
        if not changed:
            return
