"""Saving and loading statistics Datasets as NetCDF.

NetCDF attributes hold only strings, numbers and arrays of them. The toolkit's
attrs may also be ``None``, ``bool``, ``dict`` or ``list`` values; ``save``
encodes those as JSON strings and records which keys it encoded, and
``load`` decodes them, so attrs round-trip intact.

Writes go through :func:`toolkit.atomic.atomic_path`: a temporary file in the
target folder renamed over the final name (``os.replace``), so an interrupted
save never leaves a broken file under the final name. The file gets the
permissions a plain ``open(path, "w")`` would give it: those of the file it
replaces, else ``0o666`` masked by the process umask.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import xarray as xr

from toolkit._version import __version__
from toolkit.atomic import atomic_path, create_temp
from toolkit.errors import OutputPathError, ResultsFileError, ResultsNotFoundError

#: Version of the on-disk layout; bump when a change makes old files unreadable.
FORMAT_VERSION = 1
_ENCODED_KEY = "toolkit_json_attrs"
_ENGINE = "h5netcdf"


def _encode_attrs(attrs: dict) -> dict:
    out, encoded = {}, []
    for key, value in attrs.items():
        if isinstance(value, (bool, dict, list, tuple)) or value is None:
            out[key] = json.dumps(value)
            encoded.append(key)
        else:
            out[key] = value
    if encoded:
        out[_ENCODED_KEY] = json.dumps(encoded)
    return out


def _decode_attrs(attrs: dict) -> dict:
    attrs = dict(attrs)
    encoded = json.loads(attrs.pop(_ENCODED_KEY, "[]"))
    for key in encoded:
        if key in attrs:
            attrs[key] = json.loads(attrs[key])
    return attrs


def encode_for_netcdf(ds: xr.Dataset) -> xr.Dataset:
    """Return a copy of ``ds`` whose attrs (Dataset, variables and coords)
    are all NetCDF-safe; see the module docstring."""
    out = ds.copy()
    out.attrs = _encode_attrs(ds.attrs)
    out.attrs["toolkit_format_version"] = FORMAT_VERSION
    out.attrs.setdefault("toolkit_version", __version__)
    for name in list(out.variables):
        out[name].attrs = _encode_attrs(ds[name].attrs)
    return out


def decode_from_netcdf(ds: xr.Dataset) -> xr.Dataset:
    """Inverse of :func:`encode_for_netcdf`."""
    ds.attrs = _decode_attrs(ds.attrs)
    ds.attrs.pop("toolkit_format_version", None)
    for name in list(ds.variables):
        ds[name].attrs = _decode_attrs(ds[name].attrs)
    return ds


def check_output_path(path: str | os.PathLike, what: str = "the output file", example: str = "stats.nc") -> Path:
    """Check, before any work, that a file can be written at ``path``.

    The path must not name a folder (an existing one, or a text ending in
    ``/``), no part of its folder may be a file, and the nearest existing
    folder above it must accept a new file (tried by creating and deleting
    one, which also catches read-only and virtual file systems). Missing
    folders are not created here; :func:`save` creates them.

    Parameters
    ----------
    path : str or path-like
    what : str
        How to name the path in the message (``"-o/--output"``).
    example : str
        A file name to suggest when ``path`` is a folder.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    OutputPathError
        Names the path, the problem and the fix.
    """
    text = os.fspath(path)
    path = Path(os.path.expanduser(text))
    problem = _path_problem(text, path, what, example)
    if problem:
        raise OutputPathError(text, problem)
    folder = _nearest_existing(path.parent)
    try:
        fd, probe = create_temp(folder / "toolkit-write-test")
    except OSError as e:
        raise OutputPathError(
            text, f"cannot create a file in {str(folder)!r} ({e.strerror or e}); choose a folder you can write to "
            f"for {what}", e.errno,
        ) from e
    os.close(fd)
    probe.unlink(missing_ok=True)
    return path


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _path_problem(text: str, path: Path, what: str, example: str) -> str:
    """Why no file can be written at ``path`` on the face of it (a folder, a
    file where a folder should be), else ``""``."""
    if text.endswith(("/", os.sep)) or path.is_dir():
        return f"{what} is a folder; give a file name inside it, e.g. {str(path / example)!r}"
    folder = _nearest_existing(path.parent)
    if folder.exists() and not folder.is_dir():
        return f"{str(folder)!r} is a file, not a folder; choose another path"
    return ""


def save(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write a statistics Dataset to NetCDF (HDF5 via ``h5netcdf``), atomically.

    Parameters
    ----------
    ds : xarray.Dataset
        Any toolkit Dataset (dims such as ``(layer, component)``).
    path : str or path-like
        Target file, conventionally ``*.nc``. Parent folders are created.
        The file gets the mode a plain ``open()`` would give it.

    Returns
    -------
    pathlib.Path
        The written path.

    Raises
    ------
    TypeError
        ``ds`` is not a Dataset (a DataArray: pass ``da.to_dataset()``).
    OutputPathError
        The file cannot be written there (a folder, a folder that cannot be
        created or written, a full disk...); an ``OSError`` too.
    """
    if not isinstance(ds, xr.Dataset):
        if isinstance(ds, xr.DataArray):
            how = "da.to_dataset()" if ds.name is not None else "da.to_dataset(name='my_metric')"
            raise TypeError(
                f"toolkit.save needs an xarray.Dataset, got a DataArray{f' ({ds.name!r})' if ds.name else ''}; "
                f"pass a Dataset, e.g. {how}"
            )
        raise TypeError(f"toolkit.save needs an xarray.Dataset, got {type(ds).__name__}")
    text = os.fspath(path)
    path = Path(text)
    problem = _path_problem(text, path, "it", "stats.nc")
    if problem:
        raise OutputPathError(text, problem)
    created = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            created = True
            encode_for_netcdf(ds).to_netcdf(tmp, engine=_ENGINE)
    except OSError as e:
        if not created:
            raise OutputPathError(
                text, f"cannot create a file in {str(path.parent)!r} ({e.strerror or e}); choose a folder you can "
                "write to", e.errno,
            ) from e
        raise OutputPathError(text, f"{e.strerror or e}; check the free space and permissions there", e.errno) from e
    return path


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a Dataset written by :func:`save` fully into memory.

    Raises
    ------
    ResultsNotFoundError
        No file at ``path`` (a :class:`~toolkit.errors.SourceNotFoundError`).
    ResultsFileError
        The file is not NetCDF, or it was written by a toolkit whose on-disk
        format this version cannot read (the message names that version); a
        :class:`~toolkit.errors.CheckpointFileError`.
    """
    path = Path(path)
    if path.is_dir():
        raise ResultsNotFoundError(
            str(path), "it is a folder, not a statistics file written by toolkit.save; to compute the statistics "
            "of a checkpoint folder use toolkit.weight_stats(path)",
        )
    if not path.is_file():
        raise ResultsNotFoundError(
            str(path), "no such file; toolkit.load reads a statistics file written by toolkit.save "
            "(or by `python -m toolkit ... -o FILE.nc`): check the path",
        )
    try:
        with xr.open_dataset(path, engine=_ENGINE) as f:
            ds = f.load()
    except (OSError, ValueError) as e:
        raise ResultsFileError(
            str(path), f"not a readable NetCDF file ({e}); toolkit.load reads files written by toolkit.save"
        ) from e
    fmt = ds.attrs.get("toolkit_format_version")
    if fmt is not None and int(fmt) > FORMAT_VERSION:
        raise ResultsFileError(
            str(path),
            f"written by toolkit {ds.attrs.get('toolkit_version', '?')} in on-disk format {fmt}; "
            f"this toolkit {__version__} reads format {FORMAT_VERSION} and older: upgrade the toolkit",
        )
    return decode_from_netcdf(ds)
