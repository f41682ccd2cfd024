"""The defence of :func:`toolkit.load` against files it should not read: checks made before a value is read.

A file handed to ``load`` may be anything: another format, a truncated or
damaged NetCDF4 file, a small file declaring a huge variable (a
decompression bomb), a file the toolkit did not write, or one whose bytes
make the HDF5 library loop forever or crash. In the order ``load`` runs them:

- :func:`is_hdf5` / :func:`sniff`: the HDF5 signature, else what the file is
  and what opens it (:func:`describe_file` for messages);
- :func:`probe`: a first read of every attribute and (bounded) dataset in a
  separate process, which meets a hang or a crash instead of the caller;
- :func:`check_declared_sizes`: no variable or attribute declares more bytes
  than the file stores (times :data:`MAX_RATIO` when compressed);
- :func:`check_provenance` / :func:`format_version`: the attrs say the toolkit
  wrote it, in an on-disk format this version reads.

Each refusal is a :class:`~toolkit.errors.ResultsFileError` naming the file,
the problem and what opens it instead. The codec itself is
:mod:`toolkit.io.netcdf`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import xarray as xr

from toolkit._version import __version__
from toolkit.errors import ResultsFileError

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


#: Files a probe read to the end, by identity (device, inode, size, mtime and ctime in ns): while unchanged they
#: are not probed again (a watched run's store is read whole at every refresh of its view). Any write changes
#: the ctime, so a file changed since is probed again.
_PROBED: set[tuple[int, ...]] = set()
_PROBED_MAX = 4096


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def probe(path: Path, size: int) -> str:
    """Read ``path`` first in a separate process; ``""`` when it finished (read, or refused
    with an error this process will raise too), else why it did not.

    The HDF5 library cannot be interrupted: some damaged files make it loop
    forever or crash the process (a byte changed in a global heap is enough).
    The probe process meets those instead of the caller, whose notebook kernel
    would hang or die. A fresh interpreter, not a fork: a forked notebook kernel
    shares its ZeroMQ sockets and locks with the child, and a child that
    touches them loses the kernel's messages. Costs about 0.2 s per file; a file
    the probe read to the end is not probed again while it is unchanged
    (:data:`_PROBED`).
    """
    import signal
    import subprocess

    key = _identity(path)
    if key is not None and key in _PROBED:
        return ""
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
    if proc.returncode == 0 and key is not None and key == _identity(path):  # read whole, unchanged meanwhile
        if len(_PROBED) >= _PROBED_MAX:
            _PROBED.clear()
        _PROBED.add(key)
    return ""


#: How to open a file the toolkit did not write (end of messages).
FOREIGN = "; open other NetCDF files with xarray.open_dataset(path)"
READS = "toolkit.load reads the NetCDF4 files toolkit.save writes"
SNIFF_BYTES = 64
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Deflate cannot compress more than about 1032:1; a filtered variable declaring more is a decompression bomb.
MAX_RATIO = 1100
_SLACK = 1 << 20


def describe_file(head: bytes, size: int) -> str:
    """What a file is, from its first bytes (``head``) and size, and what opens it (error messages)."""
    what, way_out = sniff(head, size)
    return f"{what}; {way_out}" if way_out else what


def sniff(head: bytes, size: int) -> tuple[str, str]:
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


def is_hdf5(path: Path, head: bytes, size: int) -> bool:
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


def check_declared_sizes(path: Path, size: int) -> None:
    """Refuse, before any value is read, a variable (or attribute) that declares more bytes than the file stores.

    A variable without filters must have all its values allocated in the file
    (``toolkit.save`` writes every value; unallocated ones would be made up
    from the fill value, in memory); a compressed one may declare at most
    :data:`MAX_RATIO` times its stored bytes. So ``load`` never needs more
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
        limit = stored * MAX_RATIO + _SLACK if filtered else stored + _SLACK
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


def check_provenance(path: Path, ds: xr.Dataset, readable: int) -> None:
    """Refuse a file the toolkit did not write, or wrote in an on-disk format this version cannot read.

    Parameters
    ----------
    path : pathlib.Path
        The file (named in the message).
    ds : xarray.Dataset
        The file opened lazily (attrs read, no values).
    readable : int
        The newest on-disk format this version reads
        (:data:`toolkit.io.netcdf.FORMAT_VERSION`); formats 1 to ``readable`` are read.

    Raises
    ------
    ResultsFileError
        Neither ``toolkit_format_version`` nor the ``toolkit_version`` other
        toolkit writers record; a format newer than ``readable``; a format
        that is no whole number from 1.
    """
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
            f"{FOREIGN}"
        )
    fmt = format_version(attrs["toolkit_format_version"], str(path))
    if fmt > readable:
        raise ResultsFileError(
            str(path),
            f"written by toolkit {attrs.get('toolkit_version', '?')} in on-disk format {fmt:g}; "
            f"this toolkit {__version__} reads format {readable} and older: upgrade the toolkit",
        )
    if fmt < 1 or fmt != int(fmt):
        raise ResultsFileError(
            str(path), f"its toolkit_format_version is {fmt:g}, which no toolkit wrote (formats are whole numbers "
            f"from 1 to {readable}): the attrs were edited, or another program wrote the file{FOREIGN}"
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
            f"number: the attrs were edited or damaged, or another program wrote the file{FOREIGN}"
        )
    return float(value)
