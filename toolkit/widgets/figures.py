"""The explorer's figures as files: PNG with the axes' boxes, SVG, PDF, CSV, and names that do not overwrite.

Every figure is drawn on a fresh pyplot-free ``matplotlib.figure.Figure`` with
:func:`toolkit.plot.draw_heatmap`, so no figure stays open in pyplot.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from toolkit.plot.heatmap_figure import auto_figsize, draw_heatmap

FORMATS = ("png", "svg", "pdf")


def panels_figure(prepared: list, *, annotate: bool = False, dpi: int = 100):
    """One row of heatmap panels (each with its own layer axis and colorbar) on a new Figure.

    Returns
    -------
    fig : matplotlib.figure.Figure
    axes : list of matplotlib.axes.Axes
        The heatmap axes, in panel order (colorbars not included).
    """
    from matplotlib.figure import Figure

    sizes = [auto_figsize(*p.values.shape, annotate=annotate) for p in prepared]
    fig = Figure(figsize=(sum(w for w, _ in sizes), max(h for _, h in sizes)), dpi=dpi, layout="constrained")
    grid = fig.add_gridspec(1, len(prepared), width_ratios=[w for w, _ in sizes])
    axes = [fig.add_subplot(grid[0, k]) for k in range(len(prepared))]
    for p, ax in zip(prepared, axes, strict=True):
        draw_heatmap(p, ax=ax, annotate=annotate)
    return fig, axes


def figure_bytes(prepared: list, fmt: str = "png", *, annotate: bool = False, dpi: int = 100):
    """The panels as ``fmt`` bytes and, for each panel, its axes' box in the image.

    Returns
    -------
    data : bytes
    boxes : list of [left, top, right, bottom]
        Fractions of the image's width and height, origin at the top left
        (what the browser needs to find the cell under the cursor).
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    fig, axes = panels_figure(prepared, annotate=annotate, dpi=dpi)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)  # draws: the constrained layout is final from here on
    width, height = fig.bbox.width, fig.bbox.height
    boxes = []
    for ax in axes:
        b = ax.get_window_extent()
        boxes.append([b.x0 / width, 1 - b.y1 / height, b.x1 / width, 1 - b.y0 / height])
    fig.clear()
    return buf.getvalue(), boxes


def png_size(png: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels, from a PNG's header."""
    import struct

    return struct.unpack(">II", png[16:24])


def panels_csv(labels: list[str], prepared: list) -> str:
    """The numbers of the panels as CSV, one line per cell: ``panel,layer,<column dim>,<metric>``."""
    import csv

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    col_dim = prepared[0].col_dim
    writer.writerow(["panel", "layer", col_dim, prepared[0].metric])
    for label, p in zip(labels, prepared, strict=True):
        for i, layer in enumerate(p.rows):
            for j, col in enumerate(p.cols):
                v = float(p.values[i, j])
                writer.writerow([label, layer, col, repr(v) if v == v else ""])
    return buf.getvalue()


def file_stem(*parts) -> str:
    """A file-name stem from ``parts`` (model, metric, selection): unsafe characters become ``_``."""
    text = "_".join(str(p) for p in parts if str(p))
    return re.sub(r"_+", "_", re.sub(r"[^\w.-]+", "_", text)).strip("_.") or "statistics"


#: Longest file name (bytes) of the common file systems (ext4, APFS, NTFS in UTF-16 units).
NAME_BYTES = 255


def unique_path(directory, stem: str, suffix: str) -> Path:
    """``directory/stem.suffix``, or ``stem-2.suffix``, ``stem-3`` ... when that file exists; a stem too long
    for a file name (255 bytes, with the counter and the temporary name of an atomic write) is cut."""
    # "-" and a counter of up to 7 digits; the atomic write's temporary name adds "." and ".<8 hex>.tmp"
    room = NAME_BYTES - len(suffix.encode()) - 8 - 14
    stem = stem.encode()[:room].decode("utf-8", "ignore")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path, n = directory / f"{stem}{suffix}", 1
    while path.exists():
        n += 1
        path = directory / f"{stem}-{n}{suffix}"
    return path


def write_file(path, data: bytes | str, what: str, example: str) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path``, whole or not at all
    (:func:`toolkit.atomic.atomic_path`), its missing folders created; returns the path written.

    Parameters
    ----------
    path : str or path-like
    data : bytes or str
    what : str
        How to name the path in a message (``"save_csv's path"``).
    example : str
        A file name to suggest when ``path`` is a folder.

    Raises
    ------
    toolkit.errors.OutputPathError
        ``path`` is a folder, a device, a FIFO or a socket (:func:`toolkit.atomic.output_target`; a symbolic
        link is followed and its target replaced), a part of its folder is a file, or the file cannot be
        written there (no permission, a name too long, a full disk); an ``OSError`` too.
    """
    from toolkit.atomic import atomic_path, output_target
    from toolkit.errors import OutputPathError
    from toolkit.io.paths import path_problem, path_text

    text = path_text(path, what)
    out = Path(os.path.expanduser(text))
    try:  # a name too long fails already in path_problem's is_dir
        problem = path_problem(text, out, what, example) if "\x00" not in text else ""
        if not problem:
            output_target(out)  # a NUL, a device, a FIFO, a socket: refused before anything is written
            out.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(out) as tmp:
                Path(tmp).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    except OutputPathError:
        raise
    except OSError as e:  # the temporary file's name in e would mislead: say the path asked for
        raise OutputPathError(text, f"{e.strerror or e}; choose another path for {what}", e.errno) from e
    if problem:
        raise OutputPathError(text, problem)
    return out
