"""The widgets' browser code: ES modules and one style sheet shipped in ``toolkit/widgets/js``.

Each anywidget's front end is one ES module joined from the files its :data:`BUNDLES` entry lists:
``common.js`` (helpers every front end uses), the parts with one job each, and the module that
composes them and exports ``render`` last. anywidget loads it inline, from the kernel, so nothing is
fetched from the network (JupyterLab and Voilà offline); the exported page inlines the same text.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "js"

#: The files of each front end, joined in this order into one module (top-level functions share one scope).
BUNDLES = {
    "heatmap.js": ("common.js", "heatmap_layout.js", "heatmap_colorbar.js", "heatmap_panel.js",
                   "heatmap_hover.js", "heatmap_dragbox.js", "heatmap_select.js", "heatmap_keys.js",
                   "heatmap.js"),
    "chart.js": ("common.js", "chart.js"),
}


def bundle(name: str) -> tuple[str, ...]:
    """The files joined for ``name``: its :data:`BUNDLES` entry, else ``common.js`` and ``name`` (a part alone,
    as the node tests load it)."""
    return BUNDLES.get(name, ("common.js", name) if name != "common.js" else ("common.js",))


@cache
def module(name: str) -> str:
    """The front end ``name`` (e.g. ``"heatmap.js"``) as one ES module: the files of :func:`bundle` joined."""
    return "\n".join((FOLDER / part).read_text(encoding="utf-8") for part in bundle(name))


@cache
def style() -> str:
    """The style sheet shared by every front end of the toolkit."""
    return (FOLDER / "widgets.css").read_text(encoding="utf-8")
