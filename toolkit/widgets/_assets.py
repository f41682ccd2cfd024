"""The widgets' browser code: ES modules and one style sheet shipped in ``toolkit/widgets/js``.

Each anywidget gets ``common.js`` (helpers every front end uses) followed by
its own module, as one ES module: anywidget loads it inline, from the
kernel, so nothing is fetched from the network (JupyterLab and Voilà offline).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "js"


@cache
def module(name: str) -> str:
    """``common.js`` followed by ``name`` (e.g. ``"heatmap.js"``), as one ES module."""
    return (FOLDER / "common.js").read_text(encoding="utf-8") + "\n" + (FOLDER / name).read_text(encoding="utf-8")


@cache
def style() -> str:
    """The style sheet shared by every front end of the toolkit."""
    return (FOLDER / "widgets.css").read_text(encoding="utf-8")
