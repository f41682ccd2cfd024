"""The explorer's save buttons: the figure (PNG, SVG, PDF), its numbers (CSV), the Dataset (NetCDF), the page
(self-contained HTML)."""

from __future__ import annotations

import html
from pathlib import Path

from toolkit.errors import EmptyInputError
from toolkit.plot._select import describe
from toolkit.widgets.figures import figure_bytes, file_stem, panels_csv, unique_path


class Saving:
    """Mixed into :class:`~toolkit.widgets.explorer.Explorer`: writing what it shows."""

    # -- saving ---------------------------------------------------------------
    def _stem(self) -> str:
        sel = {k: v for k, v in self.selection().items()
               if k not in ("metric", "scale", "robust", "layers", "components", "vmin", "vmax")}
        view = self._view()
        parts = [self.controls["filename"].value.strip() or "statistics", self.controls["metric"].value,
                 describe(sel, self.ds[self.controls["metric"].value]) if sel and view == "one" else "",
                 "" if view == "one" else view]
        lo, hi = self.controls["layers"].value
        if (lo, hi) != (self.controls["layers"].min, self.controls["layers"].max):
            parts.append(f"layers{lo}-{hi}")
        return file_stem(*parts)

    def save_figure(self, path=None, *, fmt=None, dpi=150) -> Path:
        """Save the figure shown as PNG, SVG or PDF.

        The default name ``<out_dir>/<file name>_<metric>_<selection>.<fmt>``
        gets ``-2``, ``-3`` ... rather than overwrite an earlier save.

        Raises
        ------
        toolkit.errors.EmptyInputError
            No figure is shown (the selection left nothing to draw).
        """
        if not self.prepared:
            raise EmptyInputError("no figure to save: " + self.message)
        fmt = fmt or (Path(path).suffix.lstrip(".").lower() if path is not None else self.controls["format"].value)
        path = Path(path) if path is not None else unique_path(self.out_dir, self._stem(), f".{fmt}")
        data, _ = figure_bytes(self.prepared, fmt, annotate=self.controls["annotate"].value, dpi=dpi)
        path.write_bytes(data)
        return path

    def save_png(self, path=None, *, dpi=150) -> Path:
        """:meth:`save_figure` as PNG."""
        return self.save_figure(path, fmt="png", dpi=dpi)

    def save_csv(self, path=None) -> Path:
        """Save the numbers of the panels shown as CSV (``panel,layer,<column>,<metric>``, one line per cell)."""
        if not self.prepared:
            raise EmptyInputError("no numbers to save: " + self.message)
        path = Path(path) if path is not None else unique_path(self.out_dir, self._stem(), ".csv")
        path.write_text(panels_csv([p.label for p in self.panels], self.prepared))
        return path

    def save_netcdf(self, path=None) -> Path:
        """Save the (first) Dataset with :func:`toolkit.save`; default ``<out_dir>/<file name>.nc``, never
        overwritten."""
        from toolkit.io import save

        stem = self.controls["filename"].value.strip() or "statistics"
        path = Path(path) if path is not None else unique_path(self.out_dir, file_stem(stem), ".nc")
        save(self.ds, path)
        return path

    def save_html(self, path=None) -> Path:
        """Export the explorer as one self-contained HTML page (:func:`toolkit.widgets.export_html`: every
        metric, hover, zoom, keys and the stored spectra's drill-downs, offline); default
        ``<out_dir>/<file name>.html``, never overwritten."""
        from toolkit.widgets.export import export_html

        stem = self.controls["filename"].value.strip() or "statistics"
        path = Path(path) if path is not None else unique_path(self.out_dir, file_stem(stem), ".html")
        models = self.models
        return export_html([m for _, m in models] if len(models) > 1 else models[0][1], path,
                           labels=[label for label, _ in models] if len(models) > 1 else None)

    def _report(self, action):
        try:
            self.status.value = f"Saved <code>{html.escape(str(action()))}</code>"
        except Exception as err:  # noqa: BLE001 - a button has nowhere else to report
            self.status.value = f"Could not save: {html.escape(str(err))}"

