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
import sys
from pathlib import Path

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.atomic import atomic_path, create_temp
from toolkit.errors import (
    OutputPathError,
    PathTypeError,
    ResultsFileError,
    ResultsNotFoundError,
    UnsavableDatasetError,
)

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
    UnsavableDatasetError
        ``ds`` is not a Dataset (a DataArray: pass ``da.to_dataset()``), or an
        attr or variable cannot be stored in NetCDF (the message names it); a
        ``TypeError`` too.
    PathTypeError
        ``path`` is not a str or path-like (a ``TypeError`` too).
    OutputPathError
        The file cannot be written there (a folder, a folder that cannot be
        created or written, a full disk...); an ``OSError`` too.
    """
    if not isinstance(ds, xr.Dataset):
        if isinstance(ds, xr.DataArray):
            how = "da.to_dataset()" if ds.name is not None else "da.to_dataset(name='my_metric')"
            raise UnsavableDatasetError(
                "ds", f"toolkit.save needs an xarray.Dataset, got a DataArray{f' ({ds.name!r})' if ds.name else ''}; "
                f"pass a Dataset, e.g. {how}"
            )
        raise UnsavableDatasetError("ds", f"toolkit.save needs an xarray.Dataset, got {type(ds).__name__}")
    text = _path_text(path, "toolkit.save")
    path = Path(text)
    if "\x00" in text:
        raise OutputPathError(text, "the path holds a NUL character, which no file name can; check how it was made")
    problem = _path_problem(text, path, "it", "stats.nc")
    if problem:
        raise OutputPathError(text, problem)
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


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a Dataset written by :func:`save` fully into memory.

    Before any value is read, the file is checked: it must be NetCDF4/HDF5
    (anything else is named: NetCDF3, GGUF, safetensors, text...), every
    variable must store the bytes it declares (a small file declaring a huge
    variable is refused instead of filling memory), and its attrs must say the
    toolkit wrote it, in an on-disk format this version reads. Files the
    toolkit never wrote open with ``xarray.open_dataset(path)``.

    Raises
    ------
    PathTypeError
        ``path`` is not a str or path-like.
    ResultsNotFoundError
        No file at ``path`` (a :class:`~toolkit.errors.SourceNotFoundError`).
    ResultsFileError
        The file is not NetCDF4/HDF5 (the message says what it is), declares
        more values than it stores, was not written by the toolkit, was written
        by a toolkit whose on-disk format this version cannot read (the message
        names that version), or holds a format version or encoded attrs that
        cannot be read; a :class:`~toolkit.errors.CheckpointFileError`.
    """
    text = _path_text(path, "toolkit.load")
    if "\x00" in text:
        raise ResultsNotFoundError(text, "the path holds a NUL character, which no file name can; check how it was "
                                   "made")
    path = Path(text)
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
            head = f.read(_SNIFF)
    except OSError as e:
        raise ResultsFileError(str(path), f"cannot be read ({e.strerror or e}); check its permissions") from e
    if not _is_hdf5(path, head, size):
        what, way_out = _sniff(head, size)
        raise ResultsFileError(str(path), f"not a NetCDF4 file: {what}; {way_out or _READS + _FOREIGN}")
    problem = _probe(path, size)
    if problem:
        raise ResultsFileError(str(path), f"{problem}; the file is damaged (or not a file toolkit.save wrote), so it "
                               f"is not read in this process{_FOREIGN}")
    return _read(path, size)


def _read(path: Path, size: int) -> xr.Dataset:
    """The checks of :func:`load` that need the HDF5 library, then the values."""
    try:
        _check_declared_sizes(path, size)
        with xr.open_dataset(path, engine=_ENGINE, phony_dims="sort") as f:  # lazily: attrs first, values later
            _check_provenance(path, f)
            ds = f.load()
    except ResultsFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        raise ResultsFileError(
            str(path), f"an HDF5 file that cannot be read as NetCDF4 ({type(e).__name__}: {str(e)[:300]}); it is "
            f"damaged, or not a file toolkit.save wrote{_FOREIGN}"
        ) from e
    return decode_from_netcdf(ds, str(path))


#: Seconds the probe process may take to read a file in :func:`_probe` (plus one per 20 MB).
PROBE_TIMEOUT_S = 60.0

#: What the probe process runs: every attribute and (bounded) dataset of the file, with h5py alone.
_PROBE = """
import sys
import h5py
limit = int(sys.argv[2])
def visit(name, obj):
    dict(obj.attrs)
    if isinstance(obj, h5py.Dataset) and obj.size * obj.dtype.itemsize <= limit:
        obj[()]
with h5py.File(sys.argv[1], "r") as f:
    dict(f.attrs)
    f.visititems(visit)
"""


def _probe(path: Path, size: int) -> str:
    """Read ``path`` first in a separate process; ``""`` when it finished (read, or refused
    with an error this process will raise too), else why it did not.

    The HDF5 library cannot be interrupted: some damaged files make it loop
    forever or crash the process (a byte changed in a global heap is enough).
    The probe process meets those instead of the caller, whose notebook kernel
    would hang or die. A fresh interpreter, not a fork: a forked notebook kernel
    shares its ZeroMQ sockets and locks with the child, and a child that
    touches them loses the kernel's messages. Costs about 0.2 s per load.
    """
    import signal
    import subprocess

    timeout = PROBE_TIMEOUT_S + size / 20e6
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(path), str(4 * size + (1 << 20))],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"reading it did not finish in {timeout:.0f} s (the HDF5 library loops on it)"
    except OSError:
        return ""  # no process to spare: read it here
    if proc.returncode < 0:
        sig = -proc.returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return f"reading it crashes the HDF5 library (signal {name})"
    return ""


def _path_text(path, where: str) -> str:
    """``path`` as a str, or a :class:`PathTypeError` (a ``TypeError``) for what is no path."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str):
            return text
        raise PathTypeError(path, f"{where}: the path-like gives bytes ({text[:60]!r}); pass a str path")
    if isinstance(path, (bytes, bytearray)):
        raise PathTypeError(path, f"{where}: the path is bytes ({bytes(path)[:60]!r}); pass a str: os.fsdecode(path)")
    raise PathTypeError(path, f"{where}: the path is of type {type(path).__name__} ({str(path)[:60]!r}); pass a "
                        "str or a pathlib.Path, e.g. 'stats.nc'")


#: How to open a file the toolkit did not write (end of messages).
_FOREIGN = "; open other NetCDF files with xarray.open_dataset(path)"
_READS = "toolkit.load reads the NetCDF4 files toolkit.save writes"
_SNIFF = 64
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Deflate cannot compress more than about 1032:1; a filtered variable declaring more is a decompression bomb.
_MAX_RATIO = 1100
_SLACK = 1 << 20


def describe_file(head: bytes, size: int) -> str:
    """What a file is, from its first bytes (``head``) and size, and what opens it (error messages)."""
    what, way_out = _sniff(head, size)
    return f"{what}; {way_out}" if way_out else what


def _sniff(head: bytes, size: int) -> tuple[str, str]:
    """``(what the file is, what opens it or "")`` from its first bytes."""
    if size == 0:
        return "the file is empty (0 bytes)", ""
    if head[:3] == b"CDF" and head[3:4] in (b"\x01", b"\x02", b"\x05"):
        kind = {b"\x01": "classic", b"\x02": "64-bit offset", b"\x05": "64-bit data (CDF5)"}[head[3:4]]
        return (f"it is a NetCDF3 file ({kind} format), which toolkit.save never writes (it writes NetCDF4/HDF5)",
                "xarray.open_dataset(path) reads it (with scipy or netCDF4 installed)")
    if head[:4] == b"GGUF":
        return "it is a GGUF model file", "compute its statistics with toolkit.weight_stats(path)"
    if len(head) >= 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < size:
        return "it is a safetensors weight file", "compute its statistics with toolkit.weight_stats(folder)"
    known = [(b"PK\x03\x04", "a zip archive (a PyTorch .bin/.pt checkpoint or a NumPy .npz?)"),
             (b"\x93NUMPY", "a NumPy .npy array"), (b"\x89PNG\r\n\x1a\n", "a PNG image (a --plot output?)")]
    for magic, what in known:
        if head.startswith(magic):
            return f"it is {what}", ""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "it is a Python pickle", ""
    text = None
    for cut in range(4):  # a character may be cut at the end of the sniffed bytes
        try:
            text = head[:len(head) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text and all(c.isprintable() or c in "\r\n\t" for c in text):
        kind = "JSON" if text.lstrip()[:1] in ("{", "[") else "text"
        return f"it is a {kind} file starting with {text[:30]!r}", ""
    return f"it starts with the bytes {head[:8].hex(' ')}, not the signature of HDF5 ({_HDF5_SIGNATURE.hex(' ')})", ""


def _is_hdf5(path: Path, head: bytes, size: int) -> bool:
    """The HDF5 signature at offset 0, or at 512, 1024, 2048... (after a user block)."""
    if head.startswith(_HDF5_SIGNATURE):
        return True
    offset = 512
    with open(path, "rb") as f:
        while offset + 8 <= size and offset <= 1 << 30:
            f.seek(offset)
            if f.read(8) == _HDF5_SIGNATURE:
                return True
            offset *= 2
    return False


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _check_declared_sizes(path: Path, size: int) -> None:
    """Refuse, before any value is read, a variable (or attribute) that declares more bytes than the file stores.

    A variable without filters must have all its values allocated in the file
    (``toolkit.save`` writes every value; unallocated ones would be made up
    from the fill value, in memory); a compressed one may declare at most
    :data:`_MAX_RATIO` times its stored bytes. So ``load`` never needs more
    memory than about the file's size (times the compression ratio for
    compressed variables).
    """
    import h5py
    import numpy as np

    problems: list[str] = []

    def declared(shape, dtype) -> int:
        return int(np.prod(shape, dtype=object)) * dtype.itemsize if shape is not None else 0

    def visit(name, obj):
        for key in obj.attrs:
            aid = obj.attrs.get_id(key)
            want = declared(aid.shape, aid.dtype)
            if want > aid.get_storage_size() + _SLACK:
                problems.append(f"attribute {key!r} of {name!r} declares {_human(want)} but the file stores "
                                f"{_human(aid.get_storage_size())} of it")
        if not isinstance(obj, h5py.Dataset) or problems:
            return
        label = obj.attrs.get("NAME", b"")
        if isinstance(label, bytes) and label.startswith(b"This is a netCDF dimension but not a netCDF variable"):
            return  # a dimension without a coordinate: only its length is read
        want, stored = declared(obj.shape, obj.dtype), obj.id.get_storage_size()
        filtered = obj.id.get_create_plist().get_nfilters() > 0
        limit = stored * _MAX_RATIO + _SLACK if filtered else stored + _SLACK
        if want > limit:
            problems.append(
                f"variable {name!r} declares {_human(want)} ({obj.shape} x {obj.dtype}) but the file stores "
                f"{_human(stored)} of it" + (" compressed" if filtered else "")
            )

    with h5py.File(path, "r") as f:
        visit("/", f)
        f.visititems(visit)
    if problems:
        raise ResultsFileError(
            str(path), f"{problems[0]} (the file is {_human(size)}): it is truncated, or was not written by "
            "toolkit.save (which writes every value); reading it would fill memory with values the file does "
            "not hold, so it is not read"
        )


def _check_provenance(path: Path, ds: xr.Dataset) -> None:
    """The file was written by the toolkit (``toolkit_format_version``, or the
    ``toolkit_version`` other toolkit writers record) in a format this version reads."""
    attrs = ds.attrs
    if "toolkit_format_version" not in attrs:
        if "toolkit_version" in attrs:  # written by another writer of the toolkit (the lab's NetCDF)
            return
        names = list(ds.data_vars) or list(ds.variables)
        shown = ", ".join(map(repr, names[:6])) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        what = (f"variable{'s' if len(names) > 1 else ''} {shown}") if names else "no variables"
        raise ResultsFileError(
            str(path), f"a NetCDF4/HDF5 file with {what} (dims {dict(ds.sizes)}) but without the attrs "
            "toolkit.save writes (toolkit_format_version, toolkit_version): the toolkit did not write it"
            f"{_FOREIGN}"
        )
    fmt = format_version(attrs["toolkit_format_version"], str(path))
    if fmt > FORMAT_VERSION:
        raise ResultsFileError(
            str(path),
            f"written by toolkit {attrs.get('toolkit_version', '?')} in on-disk format {fmt:g}; "
            f"this toolkit {__version__} reads format {FORMAT_VERSION} and older: upgrade the toolkit",
        )
    if fmt < 1 or fmt != int(fmt):
        raise ResultsFileError(
            str(path), f"its toolkit_format_version is {fmt:g}, which no toolkit wrote (formats are whole numbers "
            f"from 1 to {FORMAT_VERSION}): the attrs were edited, or another program wrote the file{_FOREIGN}"
        )


def format_version(value, source: str) -> float:
    """The ``toolkit_format_version`` attr as a number (never rounded: 1.9 stays 1.9).

    Raises
    ------
    ResultsFileError
        It is not one real number (a str, an array, a bool, NaN).
    """
    import numbers

    import numpy as np

    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ResultsFileError(
            source, f"its toolkit_format_version attr is {str(value)[:40]!r} ({type(value).__name__}), not a "
            f"number: the attrs were edited or damaged, or another program wrote the file{_FOREIGN}"
        )
    return float(value)
