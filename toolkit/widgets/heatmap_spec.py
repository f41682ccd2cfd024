"""What the browser's heatmap is given: a prepared panel as plain JSON (no drawing, no statistics).

The colours are :meth:`toolkit.plot.HeatmapData.face_colors` (the RGBA the
saved matplotlib figure paints) and the colour bar :meth:`~toolkit.plot.HeatmapData.colorbar`,
so the page and a saved PNG show one colour for one value; panels on a
shared scale get one colour bar (:func:`spec`).
"""

from __future__ import annotations

import numpy as np


def hex_colors(rgba) -> list:
    """``"#rrggbb"`` of each RGBA (floats in [0, 1], last axis), None where alpha is 0; nested like the input."""
    rgba = np.asarray(rgba, dtype=float)
    ints = np.clip(np.round(rgba[..., :3] * 255), 0, 255).astype(int)
    flat = [f"#{c[0]:02x}{c[1]:02x}{c[2]:02x}" if a > 0 else None
            for c, a in zip(ints.reshape(-1, 3), rgba[..., 3].ravel(), strict=True)]
    return np.asarray(flat, dtype=object).reshape(rgba.shape[:-1]).tolist()


def colorbar(prepared) -> dict:
    """The colour bar of a prepared panel with its colours as hex.

    A panel of one value (:attr:`~toolkit.plot.heatmap_data.PreparedHeatmap.constant`, painted in one colour)
    gets ``constant`` True and that one colour in ``colors``: the browser draws one swatch at its one tick,
    not a bar that looks like a range.
    """
    bar = prepared.colorbar()
    colors = hex_colors(np.asarray(bar["colors"]))
    constant = prepared.constant is not None and len(set(colors)) == 1
    return {**bar, "colors": colors[:1] if constant else colors, "constant": constant,
            "ticks": [[float(pos), str(label)] for pos, label in bar["ticks"]]}


#: The note of hatched cells while a pass is still measuring (a finished panel's says "no value (NaN)").
PENDING_NOTE = "hatched: not measured yet (or no value)"


def notes(prepared, *, pending: bool = False) -> list[str]:
    """The panel's notes (:attr:`~toolkit.plot.heatmap_data.PreparedHeatmap.notes`); while a pass is still
    measuring (``pending``) its hatched cells are mostly the ones not measured yet, and the note says so."""
    return [PENDING_NOTE if pending and n == "hatched: no value (NaN)" else n for n in prepared.notes]


def panel(prepared, hover: list, *, cbar: bool = True, pending: bool = False) -> dict:
    """One panel: ``title``, ``rows``, ``cols``, ``colors``, ``hover``, ``xlabel``, ``cbar``, and ``marks``
    (``marks[row][col]``: the cell gets the mark of an uncertain alpha, :mod:`toolkit.plot.fit_marks`;
    None when the panel has none); ``pending``: a pass is still measuring (:func:`notes`)."""
    marks = prepared.marks.tolist() if prepared.marks is not None and prepared.marks.any() else None
    return {"marks": marks, "title": prepared.title, "rows": [str(r) for r in prepared.rows],
            "cols": [str(c) for c in prepared.col_labels], "colors": hex_colors(prepared.face_colors()),
            "hover": hover, "xlabel": "\n".join(notes(prepared, pending=pending)),
            "cbar": colorbar(prepared) if cbar else None,
            "scale": prepared.scale, "digits": prepared.digits}


def spec(prepared: list, hovers: list, *, shared: bool = False, hint: str = "", pending: bool = False) -> dict:
    """The spec of :class:`~toolkit.widgets.heatmap_view.HeatmapView` for panels ``prepared``.

    With ``shared`` (one norm for every panel) the panels have no colour bar of their own and
    ``shared_cbar`` is the first panel's, labelled with every panel's distinct label. ``pending``: a pass
    is still measuring (hatched cells are "not measured yet", :func:`notes`).
    """
    panels = [panel(p, h, cbar=not shared, pending=pending) for p, h in zip(prepared, hovers, strict=True)]
    shared_cbar = None
    if shared and prepared:
        shared_cbar = colorbar(prepared[0])
        shared_cbar["label"] = "\n".join(dict.fromkeys(p.cbar_label for p in prepared))
    return {"panels": panels, "shared_cbar": shared_cbar, "hint": hint}
