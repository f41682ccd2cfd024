"""Data files of the toolkit: the top-level ``data/`` of the repository, installed with the package.

========================  ======================================================
file                      what
========================  ======================================================
``prompts.txt``           default texts of :func:`toolkit.activation_stats`
                          (prose, code, math, dialogue, several languages;
                          separated by ``---`` lines)
``finetune.txt``          default training text of ``python -m toolkit finetune``
                          (math word problems with worked answers)
``heldout.txt``           held-out English prose of notebook 05's perplexity
                          (:data:`toolkit.analysis.HELD_OUT_TEXT`), written for it
``attention_lab.nc``      the committed 200-epoch run of ``python -m toolkit lab``
                          (N = 17 tokens), read by :func:`toolkit.lab.load_result`
``attention_lab_n65.nc``  the committed N = 65 run (``--preset up16``),
                          ``load_result("up16")``
========================  ======================================================

>>> from toolkit.data import data_path
>>> data_path("prompts.txt").name
'prompts.txt'
"""

from __future__ import annotations

from pathlib import Path

FILES = ("prompts.txt", "finetune.txt", "heldout.txt", "attention_lab.nc", "attention_lab_n65.nc")

_HERE = Path(__file__).resolve().parent

#: Folders searched for the files, in order. An installed wheel has them in ``files/`` beside
#: this module: pyproject.toml maps the top-level ``data/`` to the package ``toolkit.data.files``.
#: A source checkout (and so an editable install, which runs this module from the checkout) has
#: them in its top-level ``data/``, two levels above this file.
LOCATIONS = (_HERE / "files", _HERE.parents[1] / "data")

__all__ = ["FILES", "LOCATIONS", "data_path"]


def data_path(name: str) -> Path:
    """Path of the data file ``name`` (one of :data:`FILES`).

    The first of :data:`LOCATIONS` that holds it: ``toolkit/data/files/`` of an installed
    wheel, else the top-level ``data/`` of a source checkout or editable install. Where neither
    does (a broken install), the path it would have in the wheel, so that opening it names
    the missing file. Treat the file as read-only: write your own results elsewhere.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`FILES`.
    """
    if name not in FILES:
        raise ValueError(f"unknown data file {name!r}; the package ships {', '.join(FILES)}")
    for folder in LOCATIONS:
        if (folder / name).is_file():
            return folder / name
    return LOCATIONS[0] / name
