"""The explorer's side panel: the opened cell (its facts and drill-down) and the top cells table.

A cell opens on a click or Enter in the heatmap (:meth:`CellPanel.show_cell`
from code). Its drill-down is drawn from the Dataset's stored spectrum; when
the Dataset holds none but records a local checkpoint, the one matrix is read
and its spectrum computed in the background
(:func:`toolkit.collect.weights.cell_spectrum`, cached), the panel saying
"computing…" meanwhile. When the figure changes (another metric, a zoomed
layer range) the opened cell stays open if it is still shown, else the side
panel is cleared: it never describes a cell that is not on screen.
"""

from __future__ import annotations

import html
import os
import threading

import ipywidgets as W

from toolkit.errors import EmptyInputError, ToolkitError
from toolkit.plot.numbers import distinct_digits, format_column, format_value
from toolkit.widgets import _controls as C
from toolkit.widgets.cells import Panel, Shown, is_activations, top_cells
from toolkit.widgets.chart_view import ChartView


class CellPanel:
    """What the explorer says about single cells: the opened cell's facts and drill-down, and the top cells.

    It is told each figure drawn (:meth:`update`) and draws on the heatmap only the selected cell's outline.

    Parameters
    ----------
    view : toolkit.widgets.heatmap_view.HeatmapView
        The heatmap whose ``selected`` cell this panel follows.
    read_entries : bool, default True
        Read an opened cell's matrix (entry histogram) and compute a missing spectrum from a local checkpoint.

    Attributes
    ----------
    widget : ipywidgets.VBox
        The side panel: the opened cell's facts and drill-down, then the top cells.
    cell_text : ipywidgets.HTML
        The opened cell's facts.
    drill : ChartView
        The opened cell's drill-down.
    rank : ipywidgets.ToggleButtons
        Top cells: ``highest`` or ``lowest``.
    top : ipywidgets.HTML
        The top cells table.
    cell : toolkit.widgets.drilldown.DrillDown or None
        The drill-down shown; None when none is.
    shown : toolkit.widgets.cells.Shown
        The figure drawn now.
    """

    def __init__(self, view, *, read_entries: bool = True):
        self.view, self.read_entries = view, read_entries
        self.shown, self.cell = Shown(), None
        self.cell_text, self.top, self.drill = W.HTML(), W.HTML(), ChartView()
        self.rank = W.ToggleButtons(options=(("highest", "highest"), ("lowest", "lowest")), value="highest",
                                    style={"button_width": "auto"})
        self.rank.observe(lambda _: self.show_top(), names="value")
        self.widget = W.VBox([self.cell_text, self.drill, C.labelled("top cells", self.rank), self.top])
        self.widget.add_class("toolkit-explorer-side")
        self._opened_key = None  # (panel label, id(ds), selection, combine, layer, column) of the opened cell
        self._spectra: dict = {}  # cell -> Dataset from cell_spectrum, or the error text
        self._computing: dict = {}  # cell -> thread computing its spectrum
        self._matrices: dict = {}  # (id(ds), selection, layer, column) -> matrix, or why it cannot be read

    def update(self, shown: Shown) -> None:
        """A new figure (or a message instead of one): keep the opened cell open (and outlined) if it is still
        shown, with its facts for the metric now shown, else clear the side panel; list the top cells."""
        self.shown = shown
        if not shown.prepared:
            self.top.value = ""
            self.clear()
            return
        self._follow_cell()
        self.show_top()

    def show_top(self, k: int = 5) -> None:
        """List the ``k`` highest (or lowest, as ``rank`` says) cells of the panels shown in ``top``."""
        panels, prepared = self.shown.panels, self.shown.prepared
        if not prepared:
            self.top.value = ""
            return
        lowest = self.rank.value == "lowest"
        rows = [r for p, q in zip(panels, prepared, strict=True)
                for r in top_cells(q, k, lowest=lowest, label=p.label)]
        rows = sorted(rows, key=lambda r: r[3], reverse=not lowest)[:k]
        multi = len(prepared) > 1
        # the digits that tell the panels' values apart, and the rows of the table from one another
        # (the hover's digits, more only where two rows would read alike), every row with those digits and
        # in one notation (format_column: "192.0" beside "192.3", not "192")
        digits = distinct_digits([r[3] for r in rows], max(q.digits for q in prepared))
        texts = format_column([r[3] for r in rows], digits)
        head = "".join(f"<th>{h}</th>" for h in (["model"] if multi else []) + ["layer", "column", "value"])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in
                                        ([lab] if multi else []) + [layer, col, text]) + "</tr>"
                       for (lab, layer, col, _), text in zip(rows, texts, strict=True))
        self.top.value = f"<table class='toolkit-top-cells'><tr>{head}</tr>{body}</table>"

    # -- what a cell offers ----------------------------------------------------
    def hint(self, panels, *, per_matrix: bool = True) -> str:
        """What opening a cell gives, for ``panels`` (no promise of a spectrum that cannot come).

        Parameters
        ----------
        panels : list of Panel
        per_matrix : bool, default True
            The columns are components (one matrix per cell); heads, experts ... have no spectrum.
        """
        if not panels:
            return ""
        p = panels[0]
        keys = "Click a cell, or move with the arrow keys and press Enter,"
        if is_activations(p.ds):
            return f"{keys} for its numbers (activation statistics: no spectrum to draw)."
        if not per_matrix:
            return f"{keys} for its numbers (spectra are per matrix: these columns have none)."
        if "eigenvalues" in p.ds:
            return f"{keys} for its spectrum (ESD with the power-law fit) and its entries."
        if self._spectrum_source(p) is not None:
            return f"{keys} to compute its spectrum (reads that one matrix)."
        return (f"{keys} for its numbers. No spectrum is stored: weight_stats(..., keep_spectra=True) keeps them, "
                "or explore the checkpoint itself.")

    def _spectrum_source(self, panel: Panel) -> str | None:
        """The local checkpoint a missing spectrum can be computed from, or None (not weights, a comparison,
        entries not to be read, or a source that is not a local file)."""
        ds = panel.ds
        if not self.read_entries or panel.combine or is_activations(ds) or "eigenvalues" in ds:
            return None
        if ds.attrs.get("base_source") or ds.attrs.get("checkpoint_sources") is not None:
            return None  # a comparison: the spectrum of an update needs both sides
        source = str(ds.attrs.get("source") or "")
        return source if source and os.path.exists(source) else None

    # -- cells ----------------------------------------------------------------
    def _cell_index(self, layer, column, panel: int):
        prepared = self.shown.prepared
        if not prepared:
            raise EmptyInputError("no figure is shown: " + self.shown.message)
        if not 0 <= panel < len(prepared):
            raise ValueError(f"panel {panel} does not exist; the figure has {len(prepared)}")
        p = prepared[panel]
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
        return "\n".join(self.shown.facts[panel].lines(i, j))

    def open(self, panel: int, row: int, col: int) -> None:
        """Open the cell at ``row``, ``col`` (positions) of ``panel``: what a click or Enter in the heatmap does."""
        p = self.shown.prepared[panel]
        self.show_cell(p.rows[row], p.cols[col], panel=panel)

    @property
    def opened(self) -> tuple | None:
        """``(layer, column)`` of the opened cell, or None."""
        return None if self._opened_key is None else self._opened_key[-2:]

    def spectrum_thread(self) -> threading.Thread | None:
        """The thread computing the opened cell's spectrum, or None (none is being computed)."""
        return self._computing.get(self._opened_key)

    def _key(self, panel: int, layer, column, panels=None):
        pan = (self.shown.panels if panels is None else panels)[panel]
        return (pan.label, id(pan.ds), tuple(sorted(map(str, pan.selection.items()))), pan.combine, layer, column)

    def show_cell(self, layer, component, *, panel: int = 0, wait: bool = False):
        """Open a cell: its facts and drill-down beside the heatmap, as a click (or Enter) on it does.

        Parameters
        ----------
        layer, component
            The cell (``component`` is the column label: a head or expert number for those columns).
        panel : int
        wait : bool, default False
            When the spectrum is being computed from the checkpoint, wait for it (scripts and tests);
            by default the panel says "computing…" and fills in when it is done.

        Returns
        -------
        toolkit.widgets.drilldown.DrillDown
            The figure's parts (``kinds``) and why others are missing (``notes``).
        """
        i, j = self._cell_index(layer, component, panel)
        self.view.selected = [panel, i, j]
        self._opened_key = self._key(panel, layer, component)
        self._write_cell_text(panel, i, j)
        dd = self._draw_drill(panel, layer, component)
        if wait and self._opened_key in self._computing:
            self._computing[self._opened_key].join()
            dd = self.cell
        return dd

    def _write_cell_text(self, panel: int, i: int, j: int) -> None:
        pan, prep, facts = self.shown.panels[panel], self.shown.prepared[panel], self.shown.facts[panel]
        lines = facts.lines(i, j)
        if "relative_change" in pan.ds and prep.metric != "relative_change" and not pan.combine:
            rc = facts._aligned(pan.ds["relative_change"], pan.selection)
            if rc is not None:
                lines.append(f"relative change: {format_value(float(rc[i, j]))}")
        text = "<br>".join(html.escape(x) for x in lines)
        self.cell_text.value = f"<div class='toolkit-cell'><b>{html.escape(pan.label)}</b><br>{text}</div>"

    def _draw_drill(self, panel: int, layer, component):
        """Draw the opened cell's drill-down: from the Dataset's stored spectrum, from one computed for this
        cell (:meth:`_compute_spectrum`), or, while that runs, what is there with "computing…"."""
        from toolkit.widgets.drilldown import DrillDown, drill_down

        pan, prep = self.shown.panels[panel], self.shown.prepared[panel]
        key, status, source = self._opened_key, "", None
        if is_activations(pan.ds):
            dd = DrillDown(layer, component, notes=["activation statistics: no spectrum or weight entries to draw"])
        else:
            matrix = self._matrix(pan, layer, component) if prep.col_dim == "component" else None
            computed = self._spectra.get(key)  # a Dataset from cell_spectrum, or why it failed
            if computed is not None and not isinstance(computed, str):
                dd = drill_down(computed, layer, component, col_dim=prep.col_dim, matrix=matrix)
            else:
                dd = drill_down(pan.ds, layer, component, col_dim=prep.col_dim, selection=pan.selection,
                                matrix=matrix)
                if isinstance(computed, str):
                    dd.notes.append(f"spectrum: {computed}")
                elif "esd" not in dd.kinds and prep.col_dim == "component":
                    source = self._spectrum_source(pan)
                if source is not None:
                    dd.notes = [n for n in dd.notes if not n.startswith("spectrum:")]
                    status = f"computing the spectrum of layer {layer} {component} … (reads that one matrix)"
        self.cell = dd
        self.drill.show(dd.spec(status=status))  # before the thread starts: its result must come after
        if source is not None:
            self._compute_spectrum(key, source, pan, layer, component)
        return dd

    def _compute_spectrum(self, key, source: str, pan: Panel, layer, component) -> None:
        """Compute one cell's spectrum in a thread (:func:`toolkit.collect.weights.cell_spectrum`, which
        caches it); draw it if the cell is still the opened one."""
        if key in self._computing:
            return
        from toolkit.metrics.fit_options import FitOptions

        ds = pan.ds
        expert = pan.selection.get("expert")
        expert = int(expert) if isinstance(expert, (int,)) and not isinstance(expert, bool) else None
        fit = FitOptions.from_attrs(ds.attrs)

        def work():
            from toolkit.collect.weights import cell_spectrum

            try:
                got = cell_spectrum(source, layer=int(layer), component=str(component), expert=expert, fit=fit,
                                    revision=str(ds.attrs.get("revision") or "") or None)
            except ToolkitError as err:
                got = str(err)
            except Exception as err:  # noqa: BLE001 - a thread has nowhere else to report
                got = f"{type(err).__name__}: {err}"
            self._spectra[key] = got
            self._computing.pop(key, None)
            shown = self.shown
            if self._opened_key == key and shown.prepared:
                try:
                    k = next(n for n in range(len(shown.panels))
                             if self._key(n, layer, component, shown.panels) == key)
                except StopIteration:
                    return
                self._draw_drill(k, layer, component)

        thread = threading.Thread(target=work, name="toolkit-cell-spectrum", daemon=True)
        self._computing[key] = thread
        thread.start()

    def _follow_cell(self) -> None:
        key = self._opened_key
        if key is not None:
            layer, column = key[-2], key[-1]
            for k in range(len(self.shown.panels)):
                if self._key(k, layer, column) == key and layer in self.shown.prepared[k].rows \
                        and column in self.shown.prepared[k].cols:
                    i, j = self._cell_index(layer, column, k)
                    self.view.selected = [k, i, j]
                    self._write_cell_text(k, i, j)
                    return
        self.clear()

    def clear(self) -> None:
        """Close the opened cell: no outline, no facts, no drill-down."""
        self._opened_key, self.cell = None, None
        self.view.selected = []
        self.cell_text.value = ""  # what opening a cell gives is said once, under the heatmap (spec "hint")
        self.drill.show({})

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
