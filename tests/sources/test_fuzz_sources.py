"""Mutated weight files, opened and read in a memory-limited worker process (hypothesis).

Bytes of a small real safetensors file, of a tiny GGUF written as llama.cpp
lays one out, and of the embedded SmolLM2 GGUF's header are changed (single
bytes, 4- and 8-byte integer fields set to extreme values, the header's
JSON edited, the file cut short); each result is opened with
:func:`toolkit.open_source` and its tensors are read, in one worker process
whose address space is limited (``RLIMIT_AS``) to what it had after reading
the original file plus a few times the file's size, with a time limit per
file. Every outcome must be a :class:`~toolkit.errors.ToolkitError` that
names the file, or a correct result (the values the ``safetensors``
library reads, the tensor table ``gguf.GGUFReader`` reads); never another
exception type, never a hang.

The examples are derandomised (the same ones every run); set
``TOOLKIT_FUZZ_EXAMPLES=<n>`` to run ``n`` random examples per format.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _fuzz_worker import Worker, log, serve

_RANDOM = int(os.environ.get("TOOLKIT_FUZZ_EXAMPLES", "0"))


def _settings(examples: int):
    return settings(
        max_examples=_RANDOM or examples, deadline=None, derandomize=not _RANDOM, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


# -- the worker (this file run as a script) --------------------------------------------------------------------------


def _outcome(path: str, kind: str, read: str) -> dict:
    """Open ``path``, read its tensors, and describe what happened (and check the values against a reference)."""
    import hashlib
    import traceback

    import torch

    from toolkit.errors import ToolkitError
    from toolkit.sources import open_source

    try:
        src = open_source(path)
        records = list(src.tensors())
        chosen = records if read == "all" else records[:4] + records[-2:]
        seen = {}
        for rec in chosen:
            tensor = rec.read()
            if tuple(tensor.shape) != tuple(rec.shape):
                return {"kind": "wrong", "detail": f"{rec.name}: read {tuple(tensor.shape)}, record says {rec.shape}"}
            raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
            seen[rec.stored_name or rec.name] = (str(tensor.dtype), tuple(tensor.shape), hashlib.sha1(raw).hexdigest())
        wrong = _check_against_reference(path, kind, src, seen) if read == "all" else ""  # gguf-py: 8 s on 98 MB
        if wrong:
            return {"kind": "wrong", "detail": wrong}
        return {"kind": "ok", "tensors": len(records)}
    except ToolkitError as exc:
        return {"kind": "typed", "type": type(exc).__name__, "message": str(exc)[:2000]}
    except BaseException as exc:  # noqa: BLE001 - anything else is what this test looks for
        return {"kind": "other", "type": type(exc).__name__, "message": str(exc)[:500],
                "traceback": traceback.format_exc()[-4000:]}


def _check_against_reference(path: str, kind: str, src, seen: dict) -> str:
    """What differs from the reference reader (``""`` when nothing does)."""
    import hashlib

    import torch

    if kind == "safetensors":
        from safetensors import safe_open

        try:
            with safe_open(path, framework="pt") as fh:
                names = set(fh.keys())
                for name, (dtype, shape, digest) in seen.items():
                    ref = fh.get_tensor(name)
                    raw = ref.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if ref.numel() else b""
                    if (str(ref.dtype), tuple(ref.shape), hashlib.sha1(raw).hexdigest()) != (dtype, shape, digest):
                        return f"tensor {name!r} differs from what safetensors reads"
        except Exception as exc:  # noqa: BLE001
            return f"opened a file the safetensors library refuses ({type(exc).__name__}: {exc})"
        if names != {n for n, *_ in src._entries}:
            return "the tensor names differ from the safetensors library's"
        return ""
    if kind == "gguf":
        from gguf import GGUFReader

        try:
            reader = GGUFReader(path)
        except Exception:  # noqa: BLE001 - gguf-py refuses some files we read; nothing to compare then
            return ""
        table = src._plan.table
        ours = {t.name: (tuple(reversed(t.shape)), t.ggml_type, t.start, t.nbytes) for t in table.tensors}
        theirs = {t.name: (tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset), int(t.n_bytes))
                  for t in reader.tensors}
        if ours != theirs:
            diff = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))[:3]
            return f"the tensor table differs from gguf.GGUFReader's at {diff}: {[ours.get(k) for k in diff]} " \
                   f"vs {[theirs.get(k) for k in diff]}"
    return ""


def _worker() -> None:
    """Serve requests on stdin (:func:`_fuzz_worker.serve`): open a file and read its tensors."""
    import warnings

    warnings.simplefilter("ignore")
    # imported now, while the parent writes the files (a warm start would import them anyway)
    import gguf  # noqa: F401
    import safetensors  # noqa: F401
    import transformers.conversion_mapping  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401

    import toolkit.sources.gguf  # noqa: F401
    import toolkit.sources.safetensors_  # noqa: F401

    serve(lambda request: _outcome(request["path"], request["kind"], request.get("read", "all")))


# -- the parent side -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spawned():
    """The worker process, started first so that its imports overlap with writing the files."""
    with Worker(__file__) as w:
        yield w


@pytest.fixture(scope="module")
def originals(spawned, tmp_path_factory, tiny_gguf_dir, smollm2_path):
    """The unmutated files: a tiny llama safetensors, a tiny Q8_0 llama GGUF, the embedded GGUF."""
    from toolkit.testing import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("fuzz")
    folder = write_tiny_checkpoint(root / "st", "llama", num_layers=1)
    safetensors = root / "tiny.safetensors"
    shutil.copyfile(folder / "model.safetensors", safetensors)
    gguf = root / "tiny.gguf"
    shutil.copyfile(tiny_gguf_dir / "q8_0.gguf", gguf)
    return {"safetensors": safetensors, "gguf": gguf, "smollm2": Path(smollm2_path)}


@pytest.fixture(scope="module")
def worker(spawned, originals):
    spawned.originals = [{"path": str(originals["safetensors"]), "kind": "safetensors", "read": "all"},
                         {"path": str(originals["gguf"]), "kind": "gguf", "read": "all"},
                         {"path": str(originals["smollm2"]), "kind": "gguf", "read": "some"}]
    return spawned


class Files:
    """Fresh file names (the GGUF plan cache is keyed by path, size and mtime)."""

    def __init__(self, folder: Path):
        self.folder, self.n = folder, 0

    def next(self, suffix: str) -> Path:
        self.n += 1
        return self.folder / f"f{self.n}{suffix}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return Files(tmp_path_factory.mktemp("fuzzed"))


def _check(reply: dict, path: Path, what) -> None:
    log(path, reply, what)
    assert reply["kind"] in ("ok", "typed"), (what, reply)
    if reply["kind"] == "typed":
        assert path.name in reply["message"], ("the error does not name the file", what, reply)
    path.unlink(missing_ok=True)


# -- mutations -------------------------------------------------------------------------------------------------------

_U32 = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 255, 2**16, 2**31 - 1, 2**31, 2**32 - 1]
_U64 = [0, 1, 2, 3, 8, 2**31, 2**32, 2**32 + 1, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _apply(data: bytes, edits) -> bytes:
    out = bytearray(data)
    cut = None
    for op, at, value in edits:
        if op == "byte" and at < len(out):
            out[at] = value
        elif op == "u32" and at + 4 <= len(out):
            struct.pack_into("<I", out, at, value)
        elif op == "u64" and at + 8 <= len(out):
            struct.pack_into("<Q", out, at, value)
        elif op == "cut":
            cut = at if cut is None else min(cut, at)
    return bytes(out if cut is None else out[:cut])


def _edits(fields: list[tuple[int, int]], header_end: int, size: int, magic: int):
    """Edits of a file: flipped bytes (mostly in the header), integer fields set to extreme values, a cut.

    ``magic``: bytes at the start that only say what the file is (left alone but for a few cuts and flips).
    """
    anywhere = st.integers(header_end, size - 1) if header_end < size else st.integers(0, size - 1)
    head = st.integers(magic, max(magic, header_end - 1))
    u32 = [at for at, width in fields if width == 4] or [0]
    u64 = [at for at, width in fields if width == 8] or [0]
    edit = st.one_of(
        st.tuples(st.just("byte"), st.one_of(head, head, anywhere), st.integers(0, 255)),
        st.tuples(st.just("u32"), st.sampled_from(u32), st.one_of(st.sampled_from(_U32), st.integers(0, 2**32 - 1))),
        st.tuples(st.just("u64"), st.sampled_from(u64), st.one_of(st.sampled_from(_U64), st.integers(0, 2**64 - 1))),
        st.tuples(st.just("cut"), st.one_of(head, anywhere, st.integers(0, size)), st.just(0)),
    )
    return st.lists(edit, min_size=1, max_size=4)


def gguf_fields(data: bytes) -> tuple[list[tuple[int, int]], int]:
    """``(offset, width)`` of the header's integer fields (counts, lengths, types, dims, offsets) and its end."""
    fields = [(4, 4), (8, 8), (16, 8)]
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24
    widths = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_string(pos):
        fields.append((pos, 8))
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n

    for _ in range(n_kv):
        pos = skip_string(pos)
        fields.append((pos, 4))
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if vtype in widths:
            if widths[vtype] in (4, 8):
                fields.append((pos, widths[vtype]))
            pos += widths[vtype]
        elif vtype == 8:
            pos = skip_string(pos)
        else:  # an array (of scalars or strings in these files)
            etype, count = struct.unpack_from("<IQ", data, pos)
            fields += [(pos, 4), (pos + 4, 8)]
            pos += 12
            for i in range(count):
                if etype == 8:
                    if i < 4:
                        pos = skip_string(pos)
                    else:
                        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
                else:
                    pos += widths[etype] * (count - i)
                    break
    for _ in range(n_tensors):
        pos = skip_string(pos)
        (ndim,) = struct.unpack_from("<I", data, pos)
        fields.append((pos, 4))
        fields += [(pos + 4 + 8 * i, 8) for i in range(ndim)]
        fields += [(pos + 4 + 8 * ndim, 4), (pos + 8 + 8 * ndim, 8)]
        pos += 4 + 8 * ndim + 12
    return fields, pos


def safetensors_edits():
    """Edits of a safetensors header's JSON: entries' dtype, shape and offsets changed, keys dropped, types swapped."""
    names = st.sampled_from(["dtype", "shape", "data_offsets"])
    values = st.one_of(
        st.sampled_from(["F32", "F16", "BF16", "F64", "I8", "C64", "F4", "BOOL", "f32", "", "X" * 300]),
        st.integers(-3, 2**64 + 1), st.none(), st.booleans(), st.floats(allow_nan=False, width=32),
        st.lists(st.one_of(st.integers(-2, 2**63), st.just(2**64 - 1), st.text(max_size=2)), max_size=4),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
    edit = st.one_of(
        st.tuples(st.just("set"), st.integers(0, 10**6), names, values),
        st.tuples(st.just("drop"), st.integers(0, 10**6), names, st.none()),
        st.tuples(st.just("entry"), st.integers(0, 10**6), st.just(""), values),
        st.tuples(st.just("whole"), st.just(0), st.just(""), values),
        st.tuples(st.just("metadata"), st.just(0), st.just(""), values),
    )
    return st.lists(edit, min_size=1, max_size=3)


def _edit_header(data: bytes, edits) -> bytes:
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    for op, index, key, value in edits:
        name = names[index % len(names)]
        if op == "whole":
            header = value
            break
        if op == "metadata":
            header["__metadata__"] = value
        elif op == "entry":
            header[name] = value
        elif isinstance(header.get(name), dict):
            if op == "set":
                header[name][key] = value
            else:
                header[name].pop(key, None)
    body = json.dumps(header).encode()
    return struct.pack("<Q", len(body)) + body + data[8 + n:]


class Layout(tuple):
    """``(bytes, integer fields, header end)`` of an original, with a short repr (hypothesis prints failing inputs)."""

    def __repr__(self) -> str:
        return f"<{len(self[0])} bytes, {len(self[1])} fields, header ends at {self[2]}>"


# -- the properties --------------------------------------------------------------------------------------------------


def test_originals_read(worker, originals, files):
    """The unmutated files give their tensors (the reference for everything below)."""
    for key, kind in (("safetensors", "safetensors"), ("gguf", "gguf")):
        path = files.next(originals[key].suffix)
        shutil.copyfile(originals[key], path)
        reply = worker.run({"path": str(path), "kind": kind})
        assert reply["kind"] == "ok" and reply["tensors"] > 5, reply


@pytest.fixture(scope="module")
def safetensors_layout(originals):
    data = originals["safetensors"].read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    # integer fields of safetensors are text; the 8-byte header length is the one binary field
    return Layout((data, [(0, 8)], 8 + n))


@given(st.data())
@_settings(100)
def test_mutated_safetensors_bytes(worker, files, safetensors_layout, data):
    original, fields, header_end = safetensors_layout
    edits = data.draw(_edits(fields, header_end, len(original), magic=0))
    path = files.next(".safetensors")
    path.write_bytes(_apply(original, edits))
    _check(worker.run({"path": str(path), "kind": "safetensors"}), path, edits)


@given(edits=safetensors_edits())
@_settings(100)
def test_edited_safetensors_header(worker, files, safetensors_layout, edits):
    original, _, _ = safetensors_layout
    path = files.next(".safetensors")
    path.write_bytes(_edit_header(original, edits))
    _check(worker.run({"path": str(path), "kind": "safetensors"}), path, edits)


@pytest.fixture(scope="module")
def tiny_gguf_layout(originals):
    data = originals["gguf"].read_bytes()
    fields, end = gguf_fields(data)
    return Layout((data, fields, end))


@given(st.data())
@_settings(150)
def test_mutated_tiny_gguf(worker, files, tiny_gguf_layout, data):
    original, fields, header_end = tiny_gguf_layout
    edits = data.draw(_edits(fields, header_end, len(original), magic=4))
    path = files.next(".gguf")
    path.write_bytes(_apply(original, edits))
    _check(worker.run({"path": str(path), "kind": "gguf"}), path, edits)


@pytest.fixture(scope="module")
def smollm2_layout(originals):
    with open(originals["smollm2"], "rb") as fh:
        head = fh.read(4 * 2**20)  # the metadata (a 49152-token vocabulary) and the tensor table: 1.8 MB
    fields, end = gguf_fields(head)
    return Layout((head, fields, end))


@given(st.data())
@_settings(25)
def test_mutated_embedded_gguf_header(worker, files, originals, smollm2_layout, data):
    head, fields, header_end = smollm2_layout
    size = originals["smollm2"].stat().st_size
    edits = data.draw(_edits(fields, header_end, len(head), magic=4))
    path = files.next(".gguf")
    shutil.copyfile(originals["smollm2"], path)
    mutated = _apply(head, edits)
    with open(path, "r+b") as fh:
        fh.write(mutated)
        if len(mutated) < len(head):
            fh.truncate(len(mutated))
    assert path.stat().st_size <= size
    _check(worker.run({"path": str(path), "kind": "gguf", "read": "some"}), path, edits)  # answers within TIMEOUT


if __name__ == "__main__":
    _worker()
