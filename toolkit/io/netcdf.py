"""The NetCDF codec of statistics Datasets: :func:`save` and :func:`load`.

NetCDF attributes hold only strings, numbers and arrays of them. The toolkit's
attrs may also be ``None``, ``bool``, ``dict`` or ``list`` values; ``save``
encodes those as JSON strings and records which keys it encoded, and
``load`` decodes them, so attrs round-trip intact.

Writes go through :func:`toolkit.atomic.atomic_path`: a temporary file in the
target folder renamed over the final name (``os.replace``), so an interrupted
save never leaves a broken file under the final name. The file gets the
permissions a plain ``open(path, "w")`` would give it: those of the file it
replaces, else ``0o666`` masked by the process umask.

Before :func:`load` reads a value, the checks of :mod:`toolkit.io.hostile`
refuse what the toolkit did not write or what could hang, crash or fill the
memory of this process; paths are checked by :mod:`toolkit.io.paths`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.atomic import atomic_path, output_target
from toolkit.constraint_types import DataOf
from toolkit.constraints import PathName, checks_options
from toolkit.errors import OutputPathError, ResultsFileError, ResultsNotFoundError, UnsavableDatasetError
from toolkit.io.hostile import (
    FOREIGN,
    READS,
    SNIFF_BYTES,
    check_declared_sizes,
    check_provenance,
    is_hdf5,
    probe,
    sniff,
)
from toolkit.io.paths import path_problem, path_text
from toolkit.io.records import is_store, open_store

#: Version of the on-disk layout; bump when a change makes old files unreadable.
FORMAT_VERSION = 1
_ENCODED_KEY = "toolkit_json_attrs"
_ENGINE = "h5netcdf"


#: Attr values NetCDF stores as they are (NumPy arrays and scalars of numbers or str too).
_PLAIN = (str, bytes, int, float, np.generic, np.ndarray)


def _plain_json(value, where: str):
    """``value`` with NumPy scalars and arrays made plain Python, checked to survive a JSON round trip."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain_json(v, where) for v in value]
    if isinstance(value, dict):
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            raise UnsavableDatasetError(where, f"{where} is a dict with the key {bad!r}, not a str: attrs that are "
                                        "dicts are stored as JSON, which keeps only str keys (it would come back "
                                        f"as {str(bad)!r}); use str keys")
        return {k: _plain_json(v, f"{where}[{k!r}]") for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise UnsavableDatasetError(where, f"{where} is of type {type(value).__name__} ({str(value)[:60]!r}), which NetCDF "
                                "cannot store; make it a str, a number, a list or a dict of those")


def _encode_attrs(attrs: dict, where: str = "the Dataset") -> dict:
    out, encoded = {}, []
    for key, value in attrs.items():
        name = f"attr {key!r} of {where}"
        if not isinstance(key, str):
            raise UnsavableDatasetError(name, f"{name} has a name that is not a str; NetCDF attr names are str")
        if isinstance(value, (bool, dict, list, tuple)) or value is None:
            out[key] = json.dumps(_plain_json(value, name))
            encoded.append(key)
        elif isinstance(value, _PLAIN):
            out[key] = value
        else:
            raise UnsavableDatasetError(name, f"{name} is of type {type(value).__name__} ({str(value)[:60]!r}), which "
                                        "NetCDF cannot store; make it a str, a number, a list or a dict of those")
    if encoded:
        out[_ENCODED_KEY] = json.dumps(encoded)
    return out


def _decode_attrs(attrs: dict, source: str = "", where: str = "") -> dict:
    """Decode the attrs :func:`_encode_attrs` encoded; ``source`` (the file) and ``where`` (`` (variable 'x')``)
    name them in the error."""
    def bad(reason: str, cause=None):
        raise ResultsFileError(
            source or "<Dataset>", f"{reason}{where}: the attrs were edited or damaged; xarray.open_dataset(path) "
            "opens the file without decoding them"
        ) from cause

    attrs = dict(attrs)
    raw = attrs.pop(_ENCODED_KEY, "[]")
    try:
        encoded = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        encoded = None
    if not isinstance(encoded, list) or not all(isinstance(k, str) for k in encoded):
        bad(f"its {_ENCODED_KEY} attr ({str(raw)[:60]!r}) is not a JSON list of attr names")
    for key in encoded:
        if key not in attrs:
            continue
        value = attrs[key]
        if not isinstance(value, str):
            bad(f"its attr {key!r} is a {type(value).__name__} ({str(value)[:60]!r}), not the JSON text it was "
                "saved as")
        try:
            attrs[key] = json.loads(value)
        except (ValueError, RecursionError) as e:
            bad(f"its attr {key!r} ({value[:60]!r}) is not valid JSON ({str(e)[:80]})", e)
    return attrs


def encode_for_netcdf(ds: xr.Dataset) -> xr.Dataset:
    """Return a copy of ``ds`` whose attrs (Dataset, variables and coords)
    are all NetCDF-safe; see the module docstring."""
    out = ds.copy()
    out.attrs = _encode_attrs(ds.attrs)
    out.attrs["toolkit_format_version"] = FORMAT_VERSION
    out.attrs.setdefault("toolkit_version", __version__)
    for name in list(out.variables):
        out[name].attrs = _encode_attrs(ds[name].attrs, f"variable {name!r}")
    return out


def decode_from_netcdf(ds: xr.Dataset, source: str = "") -> xr.Dataset:
    """Inverse of :func:`encode_for_netcdf`.

    Raises
    ------
    ResultsFileError
        An encoded attr that is not valid JSON (names the attr, its variable
        and ``source``, the file read).
    """
    ds.attrs = _decode_attrs(ds.attrs, source)
    ds.attrs.pop("toolkit_format_version", None)
    for name in list(ds.variables):
        ds[name].attrs = _decode_attrs(ds[name].attrs, source, f" (variable {name!r})")
    return ds


@checks_options(ds=DataOf(), path=PathName())
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
    InvalidOptionError
        ``ds`` is not a Dataset (a DataArray: the message says ``da.to_dataset()``),
        or ``path`` is not a non-empty str or path-like (before anything else).
    UnsavableDatasetError
        An attr or variable cannot be stored in NetCDF (the message names it);
        a ``TypeError`` too.
    OutputPathError
        The file cannot be written there (a folder, a device, a FIFO, a socket,
        a NUL in the path, a folder that cannot be created or written, a full
        disk...; :func:`toolkit.atomic.output_target`: a symbolic link is
        followed and its target replaced); an ``OSError`` too.
    """
    text = path_text(path, "toolkit.save")
    path = Path(text)
    problem = path_problem(text, path, "it", "stats.nc") if "\x00" not in text else ""
    if problem:
        raise OutputPathError(text, problem)
    output_target(text)  # a NUL, a device, a FIFO, a socket: refused before anything is written
    encoded = encode_for_netcdf(ds)  # an attr NetCDF cannot store fails here, before any file is made
    created = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            created = True
            try:
                encoded.to_netcdf(tmp, engine=_ENGINE)
            except (TypeError, ValueError) as e:
                raise UnsavableDatasetError(
                    "ds", f"toolkit.save cannot write this Dataset as NetCDF4 ({type(e).__name__}: {str(e)[:200]}); "
                    "variables must hold numbers, bools or str"
                ) from e
    except OSError as e:
        if not created:
            raise OutputPathError(
                text, f"cannot create a file in {str(path.parent)!r} ({e.strerror or e}); choose a folder you can "
                "write to", e.errno,
            ) from e
        raise OutputPathError(text, f"{e.strerror or e}; check the free space and permissions there", e.errno) from e
    return path


@checks_options(path=PathName())
def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a Dataset written by :func:`save` fully into memory (or every record of a watched run's store).

    A folder written by ``toolkit.watch(..., store=folder)`` reads as the Dataset of its complete records,
    dims ``(step, layer, component)`` (:func:`toolkit.io.records.open_store`), also while the run goes on.

    Before any value is read, the file is checked: it must be NetCDF4/HDF5
    (anything else is named: NetCDF3, GGUF, safetensors, text...), every
    variable must store the bytes it declares (a small file declaring a huge
    variable is refused instead of filling memory), and its attrs must say the
    toolkit wrote it, in an on-disk format this version reads. Files the
    toolkit never wrote open with ``xarray.open_dataset(path)``.

    Raises
    ------
    InvalidOptionError
        ``path`` is not a non-empty str or path-like.
    ResultsNotFoundError
        No file at ``path`` (a :class:`~toolkit.errors.SourceNotFoundError`).
    ResultsFileError
        The file is not NetCDF4/HDF5 (the message says what it is), declares
        more values than it stores, was not written by the toolkit, was written
        by a toolkit whose on-disk format this version cannot read (the message
        names that version), or holds a format version or encoded attrs that
        cannot be read; a :class:`~toolkit.errors.CheckpointFileError`.
    """
    text = path_text(path, "toolkit.load")
    if "\x00" in text:
        raise ResultsNotFoundError(text, "the path holds a NUL character, which no file name can; check how it was "
                                   "made")
    path = Path(text)
    if is_store(path):  # a watched run's folder of records (toolkit.watch(..., store=...))
        return open_store(path, read=load)
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
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise ResultsFileError(str(path), f"cannot be read ({e.strerror or e}); check its permissions") from e
    if not is_hdf5(path, head, size):
        what, way_out = sniff(head, size)
        raise ResultsFileError(str(path), f"not a NetCDF4 file: {what}; {way_out or READS + FOREIGN}")
    problem = probe(path, size)
    if problem:
        raise ResultsFileError(str(path), f"{problem}; the file is damaged (or not a file toolkit.save wrote), so it "
                               f"is not read in this process{FOREIGN}")
    return _read(path, size)


def _read(path: Path, size: int) -> xr.Dataset:
    """The checks of :func:`load` that need the HDF5 library, then the values."""
    try:
        check_declared_sizes(path, size)
        with xr.open_dataset(path, engine=_ENGINE, phony_dims="sort") as f:  # lazily: attrs first, values later
            check_provenance(path, f, FORMAT_VERSION)
            ds = f.load()
    except ResultsFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        raise ResultsFileError(
            str(path), f"an HDF5 file that cannot be read as NetCDF4 ({type(e).__name__}: {str(e)[:300]}); it is "
            f"damaged, or not a file toolkit.save wrote{FOREIGN}"
        ) from e
    return decode_from_netcdf(ds, str(path))


