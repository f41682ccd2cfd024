"""The explorer's save buttons: the figure (PNG, SVG, PDF), its numbers (CSV), the Dataset (NetCDF), the page
(self-contained HTML)."""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as W

from toolkit.errors import EmptyInputError
from toolkit.widgets import _controls as C
from toolkit.widgets.figures import figure_bytes, file_stem, panels_csv, unique_path, write_file


class Saver:
    """Writes what the explorer shows; owns the file name box, the format menu and the save buttons.

    Parameters
    ----------
    out_dir : str or pathlib.Path
        Where files go when no path is given; a default name gets ``-2``, ``-3`` ... rather than overwrite.
    name : str
        The file name box's first text.
    shown : callable
        ``shown()``: the figure drawn now (:class:`toolkit.widgets.cells.Shown`).
    models : callable
        ``models()``: the ``[(label, ds)]`` shown.
    describe : callable
        ``describe()``: what the figure shows, as the parts of a figure's file name after the file name box's
        text (metric, selection, view, layers); asked only when no path is given.

    Attributes
    ----------
    controls : dict of str -> ipywidgets.Widget
        ``filename``, ``format`` (png / svg / pdf), ``annotate`` (values in the cells of saved figures),
        ``save_figure``, ``save_csv``, ``save_netcdf``, ``save_html``.
    row : ipywidgets.HBox
        The file name box, the format menu, the annotate box and the buttons.
    status : ipywidgets.HTML
        What the last button saved, or why it could not.
    """

    def __init__(self, out_dir, name: str, *, shown, models, describe):
        self.out_dir = Path(out_dir)
        self._shown, self._models, self._describe = shown, models, describe
        c = self.controls = {}
        c["annotate"] = W.Checkbox(value=False, description="values in cells (saved figures)", indent=False,
                                   layout=W.Layout(width="auto"))
        c["filename"] = W.Text(value=name, description="file name", style=C.WIDE,
                               layout=W.Layout(width="max-content", min_width="22em"))
        c["format"] = W.Dropdown(options=[("PNG", "png"), ("SVG", "svg"), ("PDF", "pdf")], value="png",
                                 layout=W.Layout(width="6em"))
        c["save_figure"] = C.button("Save figure", "image", "the figure shown, in the format chosen")
        c["save_csv"] = C.button("Save numbers (CSV)", "table", "the numbers of the panels shown, one line per cell")
        c["save_netcdf"] = C.button("Save data (NetCDF)", "save", "the whole Dataset, with its metadata")
        c["save_html"] = C.button("Export HTML", "globe", "the explorer as one HTML file that works offline, "
                                  "without a kernel: every metric, hover, zoom and the stored spectra")
        self.row = W.HBox([c["filename"], c["format"], c["annotate"], c["save_figure"], c["save_csv"],
                           c["save_netcdf"], c["save_html"]],
                          layout=W.Layout(flex_flow="row wrap", align_items="center"))
        self.status = W.HTML()
        c["save_figure"].on_click(lambda _: self.report(self.save_figure))
        c["save_csv"].on_click(lambda _: self.report(self.save_csv))
        c["save_netcdf"].on_click(lambda _: self.report(self.save_netcdf))
        c["save_html"].on_click(lambda _: self.report(self.save_html))

    def _name(self) -> str:
        return self.controls["filename"].value.strip() or "statistics"

    def _default(self, suffix: str, *, described: bool = True) -> Path:
        stem = file_stem(self._name(), *self._describe()) if described else file_stem(self._name())
        return unique_path(self.out_dir, stem, suffix)

    def save_figure(self, path=None, *, fmt=None, dpi=150) -> Path:
        """Save the figure shown as PNG, SVG or PDF.

        The default name ``<out_dir>/<file name>_<metric>_<selection>.<fmt>``
        gets ``-2``, ``-3`` ... rather than overwrite an earlier save. The format is ``fmt`` (any case), else
        the suffix of ``path``, else the format menu's.

        Raises
        ------
        toolkit.errors.EmptyInputError
            No figure is shown (the selection left nothing to draw).
        toolkit.errors.OutputPathError
            The file cannot be written there (:func:`~toolkit.widgets.figures.write_file`).
        """
        shown = self._shown()
        if not shown.prepared:
            raise EmptyInputError("no figure to save: " + shown.message)
        suffix = Path(path).suffix.lstrip(".") if path is not None else ""
        fmt = str(fmt or suffix or self.controls["format"].value).lower()  # "PNG" as "png"; no suffix: the menu's
        path = Path(path) if path is not None else self._default(f".{fmt}")
        data, _ = figure_bytes(shown.prepared, fmt, annotate=self.controls["annotate"].value, dpi=dpi)
        return write_file(path, data, "save_figure's path", f"figure.{fmt}")

    def save_png(self, path=None, *, dpi=150) -> Path:
        """:meth:`save_figure` as PNG."""
        return self.save_figure(path, fmt="png", dpi=dpi)

    def save_csv(self, path=None) -> Path:
        """Save the numbers of the panels shown as CSV (``panel,layer,<column>,<metric>``, one line per cell).

        Raises
        ------
        toolkit.errors.EmptyInputError
            No figure is shown.
        toolkit.errors.OutputPathError
            The file cannot be written there (:func:`~toolkit.widgets.figures.write_file`).
        """
        shown = self._shown()
        if not shown.prepared:
            raise EmptyInputError("no numbers to save: " + shown.message)
        path = Path(path) if path is not None else self._default(".csv")
        return write_file(path, panels_csv([p.label for p in shown.panels], shown.prepared), "save_csv's path",
                          "numbers.csv")

    def save_netcdf(self, path=None) -> Path:
        """Save the (first) Dataset with :func:`toolkit.save`; default ``<out_dir>/<file name>.nc``, never
        overwritten."""
        from toolkit.io import save

        path = Path(path) if path is not None else self._default(".nc", described=False)
        save(self._models()[0][1], path)
        return path

    def save_html(self, path=None) -> Path:
        """Export the explorer as one self-contained HTML page (:func:`toolkit.widgets.export_html`: every
        metric, hover, zoom, keys and the stored spectra's drill-downs, offline); default
        ``<out_dir>/<file name>.html``, never overwritten."""
        from toolkit.widgets.export import export_html

        path = Path(path) if path is not None else self._default(".html", described=False)
        models = self._models()
        return export_html([m for _, m in models] if len(models) > 1 else models[0][1], path,
                           labels=[label for label, _ in models] if len(models) > 1 else None)

    def report(self, action) -> None:
        """Run ``action`` (a save) and say in ``status`` what it saved, or why it could not."""
        import warnings

        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                saved = action()
            # what the save warned of (an export without drill-down spectra) goes under the path, not to a log
            notes = "".join(f"<br>{html.escape(str(w.message).removeprefix(f'{saved}: '))}" for w in caught)
            self.status.value = f"Saved <code>{html.escape(str(saved))}</code>{notes}"
        except Exception as err:  # noqa: BLE001 - a button has nowhere else to report
            self.status.value = f"Could not save: {html.escape(str(err))}"
