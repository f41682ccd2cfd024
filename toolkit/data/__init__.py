"""Data files shipped inside the package (installed with the wheel).

=====================  =========================================================
file                   what
=====================  =========================================================
``prompts.txt``        default texts of :func:`toolkit.activation_stats`
                       (prose, code, math, dialogue, several languages;
                       separated by ``---`` lines)
``finetune.txt``       default training text of ``python -m toolkit finetune``
                       (math word problems with worked answers)
``attention_lab.nc``   the committed 200-epoch run of ``python -m toolkit lab``,
                       read by :func:`toolkit.lab.load_result`
=====================  =========================================================

>>> from toolkit.data import data_path
>>> data_path("prompts.txt").name
'prompts.txt'
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

FILES = ("prompts.txt", "finetune.txt", "attention_lab.nc")

__all__ = ["FILES", "data_path"]


def data_path(name: str) -> Path:
    """Path of the packaged data file ``name`` (one of :data:`FILES`).

    The file sits in ``toolkit/data/`` of the installed package (site-packages
    for a wheel install, the source tree for an editable one). Treat it as
    read-only: write your own results elsewhere.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`FILES`.
    """
    if name not in FILES:
        raise ValueError(f"unknown data file {name!r}; the package ships {', '.join(FILES)}")
    # A plain directory for any install pip makes (wheel or editable); a zip import would not be.
    return Path(str(files(__name__) / name))
