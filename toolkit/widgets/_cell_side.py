"""The explorer's side panel: a cell's hover text and drill-down, and the top cells table."""

from __future__ import annotations

import html

from toolkit.errors import EmptyInputError, ToolkitError
from toolkit.plot._style import format_value
from toolkit.widgets.cells import Panel, top_cells


class CellSide:
    """Mixed into :class:`~toolkit.widgets.explorer.Explorer`: what it says about single cells."""

    def _show_top(self, k: int = 5):
        if not self.prepared:
            self.top.value = ""
            return
        lowest = self.controls["rank"].value == "lowest"
        rows = [r for p, q in zip(self.panels, self.prepared, strict=True)
                for r in top_cells(q, k, lowest=lowest, label=p.label)]
        rows = sorted(rows, key=lambda r: r[3], reverse=not lowest)[:k]
        multi = len(self.prepared) > 1
        head = "".join(f"<th>{h}</th>" for h in (["model"] if multi else []) + ["layer", "column", "value"])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in
                                        ([lab] if multi else []) + [layer, col, format_value(v)]) + "</tr>"
                       for lab, layer, col, v in rows)
        self.top.value = f"<table class='toolkit-top-cells'><tr>{head}</tr>{body}</table>"

    # -- cells ----------------------------------------------------------------
    def _cell_index(self, layer, column, panel: int):
        if not self.prepared:
            raise EmptyInputError("no figure is shown: " + self.message)
        if not 0 <= panel < len(self.prepared):
            raise ValueError(f"panel {panel} does not exist; the figure has {len(self.prepared)}")
        p = self.prepared[panel]
        if layer not in p.rows or column not in p.cols:
            raise ValueError(f"no cell at layer {layer!r}, {p.col_dim} {column!r}: the panel shows layers "
                             f"{p.rows[0]}..{p.rows[-1]} and {p.col_dim}s {list(p.cols)}")
        return p.rows.index(layer), p.cols.index(column)

    def hover_text(self, layer, component, *, panel: int = 0) -> str:
        """What hovering over a cell shows: layer and column, value, tensor name, shape, NaN reason.

        Raises
        ------
        ValueError
            The panel shown has no such cell.
        """
        i, j = self._cell_index(layer, component, panel)
        return "\n".join(self.facts[panel].lines(i, j))

    def _clicked(self, panel: int, row: int, col: int):
        p = self.prepared[panel]
        self.show_cell(p.rows[row], p.cols[col], panel=panel)

    def show_cell(self, layer, component, *, panel: int = 0):
        """Draw a cell's drill-down beside the heatmap, as a click on it does.

        Returns
        -------
        toolkit.widgets.drilldown.DrillDown
            The figure's parts (``kinds``) and why others are missing (``notes``).
        """
        from toolkit.widgets.drilldown import drill_down

        i, j = self._cell_index(layer, component, panel)
        pan, prep = self.panels[panel], self.prepared[panel]
        matrix = self._matrix(pan, layer, component) if prep.col_dim == "component" else None
        self.cell = dd = drill_down(pan.ds, layer, component, col_dim=prep.col_dim, selection=pan.selection,
                                    matrix=matrix, dpi=90)
        lines = self.facts[panel].lines(i, j)
        if "relative_change" in pan.ds and prep.metric != "relative_change" and not pan.combine:
            rc = self.facts[panel]._aligned(pan.ds["relative_change"], pan.selection)
            if rc is not None:
                lines.append(f"relative change: {rc[i, j]:.3g}")
        text = "<br>".join(html.escape(x) for x in lines)
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in dd.notes)
        self.cell_text.value = f"<div class='toolkit-cell'><b>{html.escape(pan.label)}</b><br>{text}{notes}</div>"
        self.cell_image.value = dd.png
        self.cell_image.layout.display = "" if dd.png else "none"
        return dd

    def _matrix(self, panel: Panel, layer, component):
        """The cell's matrix for the entry histogram, or why it cannot be read (cached per cell)."""
        if not self.read_entries:
            return "not read (explore(..., read_entries=False))"
        key = (id(panel.ds), tuple(sorted(map(str, panel.selection.items()))), layer, component)
        if key not in self._matrices:
            from toolkit.widgets.cell_matrix import read_cell_matrix, read_cell_update, update_sources

            try:
                if update_sources(panel.ds, panel.selection) is not None:
                    self._matrices[key] = read_cell_update(panel.ds, layer, component, panel.selection)
                else:
                    self._matrices[key] = read_cell_matrix(panel.ds, layer, component, panel.selection)
            except ToolkitError as err:
                self._matrices[key] = str(err)
        return self._matrices[key]

