"""A folder of records: the on-disk store of a watched training run (``toolkit.watch(..., store=...)``).

Layout: ``watch.json`` (what is watched) and one ``step-<step>.nc`` per record, each a Dataset with a
``step`` dimension of length 1 written whole by :func:`toolkit.save` (a temporary file renamed over the
final name), so a file of that name is always a complete record: a reader never sees half a record, and
a run killed while writing loses only that record. :func:`toolkit.load` of the folder reads every record
(:func:`open_store`), also while the run goes on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import xarray as xr

from toolkit.errors import ResultsNotFoundError

#: The file that marks a folder as a record store.
MARKER = "watch.json"
_RECORD = re.compile(r"^step-(\d+)\.nc$")


def record_name(step: int) -> str:
    """The file name of the record of ``step``."""
    return f"step-{int(step):012d}.nc"


def record_steps(path: str | os.PathLike) -> list[int]:
    """The steps of the complete records in a store folder, ascending."""
    return sorted(int(m.group(1)) for p in Path(path).iterdir() if (m := _RECORD.match(p.name)))


def is_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a record store folder (it holds ``watch.json``)."""
    p = Path(os.fspath(path))
    return p.is_dir() and (p / MARKER).is_file()


def open_store(path: str | os.PathLike, read: Callable[[Path], xr.Dataset]) -> xr.Dataset:
    """Every complete record of a store as one Dataset, dims ``(step, layer, component)``.

    Parameters
    ----------
    path : str or path-like
        The store folder.
    read : callable
        ``read(file) -> Dataset`` of one record (:func:`toolkit.load` passes itself, with its checks).

    Returns
    -------
    xarray.Dataset
        The records concatenated along ``step``, ascending; attrs of the first record plus ``watch_steps``
        (how many records).

    Raises
    ------
    ResultsNotFoundError
        ``path`` is not a store, or it holds no record yet.
    """
    p = Path(os.path.expanduser(os.fspath(path)))
    if not is_store(p):
        raise ResultsNotFoundError(str(p), "no record store here (a folder with watch.json, from toolkit.watch)")
    steps = record_steps(p)
    if not steps:
        raise ResultsNotFoundError(str(p), "the store holds no record yet: the first is written at the first "
                                   "step the monitor records")
    records = [read(p / record_name(s)) for s in steps]
    ds = xr.concat(records, dim="step", data_vars="all", coords="different", compat="equals",
                   combine_attrs="override", join="outer")
    ds.attrs["watch_steps"] = len(steps)
    return ds
