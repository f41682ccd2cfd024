"""Saving and loading statistics Datasets as NetCDF.

NetCDF attributes hold only strings, numbers and arrays of them. The toolkit's
attrs may also be ``None``, ``bool``, ``dict`` or ``list`` values; ``save``
encodes those as JSON strings and records which keys it encoded, and
``load`` decodes them, so attrs round-trip intact.

Writes go to a temporary file in the target folder and are renamed over the
final name (``os.replace``), so an interrupted save never leaves a broken file
under the final name.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import xarray as xr

from toolkit._version import __version__
from toolkit.errors import CheckpointFileError, SourceNotFoundError

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


def save(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write a statistics Dataset to NetCDF (HDF5 via ``h5netcdf``), atomically.

    Parameters
    ----------
    ds : xarray.Dataset
        Any toolkit Dataset (dims such as ``(layer, component)``).
    path : str or path-like
        Target file, conventionally ``*.nc``. Parent folders are created.

    Returns
    -------
    pathlib.Path
        The written path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        encode_for_netcdf(ds).to_netcdf(tmp, engine=_ENGINE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a Dataset written by :func:`save` fully into memory.

    Raises
    ------
    SourceNotFoundError
        No file at ``path``.
    CheckpointFileError
        The file is not NetCDF, or it was written by a toolkit whose on-disk
        format this version cannot read (the message names that version).
    """
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(str(path), "no such file")
    try:
        with xr.open_dataset(path, engine=_ENGINE) as f:
            ds = f.load()
    except (OSError, ValueError) as e:
        raise CheckpointFileError(str(path), f"not a readable NetCDF file ({e})") from e
    fmt = ds.attrs.get("toolkit_format_version")
    if fmt is not None and int(fmt) > FORMAT_VERSION:
        raise CheckpointFileError(
            str(path),
            f"written by toolkit {ds.attrs.get('toolkit_version', '?')} in on-disk format {fmt}; "
            f"this toolkit {__version__} reads format {FORMAT_VERSION} and older: upgrade the toolkit",
        )
    return decode_from_netcdf(ds)
