"""Hostile and broken weight files, configs and source arguments (issue 14, the sources' part).

Each case answers with a typed error (a :class:`~toolkit.errors.ToolkitError`
subclass) that names the input and the way out, or with the correct numbers;
declared sizes are checked against what the file holds before anything is
built from them, so the cost stays proportional to the file.
"""

from __future__ import annotations

import builtins
import errno
import json
import re
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch

import toolkit
from toolkit.architectures import registered_architectures, resolve_adapter
from toolkit.errors import (
    CheckpointFileError,
    MappingError,
    SourceNotFoundError,
    SourceTypeError,
    ToolkitError,
    UnsupportedDtypeError,
)
from toolkit.sources import open_source
from toolkit.testing import TINY_FAMILIES, tiny_config, write_tiny_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# -- editing GGUF bytes ----------------------------------------------------------------------------------------------

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _key_value_at(data: bytes, key: str) -> int:
    """Offset of the value type (u32) of metadata ``key``; its value follows."""
    raw = key.encode()
    return data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)


def set_scalar(data: bytes, key: str, value, vtype: int | None = None) -> bytes:
    """``data`` with the scalar metadata ``key`` set to ``value`` (and its type to ``vtype``, same width)."""
    out = bytearray(data)
    at = _key_value_at(data, key)
    (old,) = struct.unpack_from("<I", out, at)
    vtype = old if vtype is None else vtype
    assert struct.calcsize(_GGUF_SCALARS[vtype]) == struct.calcsize(_GGUF_SCALARS[old])
    struct.pack_into("<I" + _GGUF_SCALARS[vtype][1:], out, at, vtype, value)
    return bytes(out)


def tensor_entry_at(data: bytes, name: str) -> int:
    """Offset of the ``ndim`` field of tensor ``name`` in the tensor table."""
    raw = name.encode()
    return data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)


def set_tensor(data: bytes, name: str, *, dims=None, ggml_type=None, offset=None, ndim=None) -> bytes:
    """``data`` with fields of tensor ``name``'s table entry replaced (dims keep their count)."""
    out = bytearray(data)
    at = tensor_entry_at(data, name)
    (n,) = struct.unpack_from("<I", out, at)
    if dims is not None:
        assert len(dims) == n
        struct.pack_into(f"<{n}Q", out, at + 4, *dims)
    if ggml_type is not None:
        struct.pack_into("<I", out, at + 4 + 8 * n, ggml_type)
    if offset is not None:
        struct.pack_into("<Q", out, at + 8 + 8 * n, offset)
    if ndim is not None:
        struct.pack_into("<I", out, at, ndim)
    return bytes(out)


def gguf_bytes(kvs: list[tuple[str, int, bytes]], *, version: int = 3) -> bytes:
    """A GGUF file of metadata only: ``(key, value type, encoded value)`` entries, no tensors."""
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    for key, vtype, payload in kvs:
        out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", vtype) + payload
    return out


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


@pytest.fixture(scope="module")
def f16_gguf(tiny_gguf_dir) -> bytes:
    data = (tiny_gguf_dir / "f16.gguf").read_bytes()
    open_source(tiny_gguf_dir / "f16.gguf")  # warm: transformers' llama code is imported once, not in a timed test
    return data


def _write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _open_fails(path, match: str, error=CheckpointFileError):
    with pytest.raises(error, match=match) as info:
        src = open_source(path)
        for rec in src.tensors():
            rec.read()
    assert isinstance(info.value, ToolkitError)
    return info.value


# -- GGUF: tensor byte ranges ----------------------------------------------------------------------------------------


def test_gguf_relabelled_type_that_grows_never_reads_the_neighbour(tmp_path, f16_gguf):
    from gguf import GGMLQuantizationType as T

    bigger = set_tensor(f16_gguf, "blk.0.attn_q.weight", ggml_type=int(T.F32))  # twice the bytes of F16
    err = _open_fails(_write(tmp_path, bigger), r"tensor 'blk\.0\.attn_(q|k)\.weight' .* overlaps tensor")
    assert "a tensor's type or shape was changed" in str(err) and err.path.endswith("m.gguf")


def test_gguf_relabelled_type_that_shrinks_leaves_bytes_no_tensor_owns(tmp_path, f16_gguf):
    from gguf import GGMLQuantizationType as T

    smaller = set_tensor(f16_gguf, "blk.0.attn_q.weight", ggml_type=int(T.Q8_0))  # 4352 of 8192 bytes
    _open_fails(_write(tmp_path, smaller), r"3840 bytes between tensor 'blk\.0\.attn_q\.weight' and tensor "
                r"'blk\.0\.attn_k\.weight' belong to no tensor")


def test_gguf_tensor_range_outside_the_data_section(tmp_path, f16_gguf):
    _open_fails(_write(tmp_path, set_tensor(f16_gguf, "blk.1.attn_v.weight", offset=2**63)),
                r"tensor data runs to byte \d+ but the file has \d+ bytes.*first 'blk\.1\.attn_v\.weight'")
    # moved onto another tensor's bytes: an overlap, not the neighbour's values
    at = tensor_entry_at(f16_gguf, "blk.0.attn_k.weight")
    (k_offset,) = struct.unpack_from("<Q", f16_gguf, at + 4 + 16 + 4)
    _open_fails(_write(tmp_path, set_tensor(f16_gguf, "blk.1.attn_v.weight", offset=k_offset)), "overlaps tensor")


@pytest.mark.parametrize("dims", [(2**32, 2**32), (2**63, 2), (2**64 - 1, 2**64 - 1)])
def test_gguf_dims_whose_product_wraps_past_2_64(tmp_path, f16_gguf, dims):
    # numpy's int64 product of (2^32, 2^32) is 0: such a tensor once took no bytes at all
    err = _open_fails(_write(tmp_path, set_tensor(f16_gguf, "blk.0.attn_q.weight", dims=dims)),
                      r"blk\.0\.attn_q\.weight.*needs \d+ bytes, more than the whole file")
    assert "truncated or its tensor table is corrupted" in str(err)


def test_gguf_more_than_four_dims_and_duplicate_names(tmp_path, f16_gguf):
    _open_fails(_write(tmp_path, set_tensor(f16_gguf, "blk.0.attn_q.weight", ndim=7)),
                r"tensor 'blk\.0\.attn_q\.weight' has 7 dimensions, more than GGUF's 4")
    twice = f16_gguf.replace(b"blk.0.attn_k.weight", b"blk.0.attn_q.weight")
    _open_fails(_write(tmp_path, twice), r"tensor 'blk\.0\.attn_q\.weight' appears twice in the tensor table")


def test_gguf_block_size_must_divide_rows(tmp_path, tiny_gguf_dir):
    data = (tiny_gguf_dir / "q8_0.gguf").read_bytes()
    _open_fails(_write(tmp_path, set_tensor(data, "blk.0.attn_q.weight", dims=(48, 64))),
                r"rows of 48 values, not a multiple of its type's block of 32")


# -- GGUF: declared sizes against the tensor table -------------------------------------------------------------------


@pytest.mark.parametrize("blocks", [3000, 10000, 100000])
def test_gguf_block_count_beyond_the_tensor_table_fails_fast(tmp_path, f16_gguf, blocks):
    path = _write(tmp_path, set_scalar(f16_gguf, "llama.block_count", blocks))
    tracemalloc.start()
    try:
        err = _open_fails(path, rf"llama\.block_count \(num_hidden_layers\)={blocks} layers, but the tensor table "
                          r"holds 2 blocks \(blk\.0 to blk\.1\)")
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # was 0.9 GB, 1.9 GB, then MemoryError: a meta model of every declared layer
    assert "re-download or re-convert" in str(err)


def test_gguf_block_count_below_the_tensor_table(tmp_path, f16_gguf):
    _open_fails(_write(tmp_path, set_scalar(f16_gguf, "llama.block_count", 1)),
                r"block_count \(num_hidden_layers\)=1 layers, but the tensor table holds 2 blocks")
    _open_fails(_write(tmp_path, set_scalar(f16_gguf, "llama.block_count", 0)),
                r"block_count \(num_hidden_layers\)=0: sizes, layer and head counts must be positive integers")


@pytest.mark.parametrize(
    ("key", "value", "vtype", "match"),
    [
        ("llama.embedding_length", 2**31, None,
         r"embedding_length \(hidden_size\)=2147483648, larger than every tensor dimension of the file \(the "
         r"largest is 96\)"),
        ("llama.feed_forward_length", 2**32 - 1, None, r"feed_forward_length \(intermediate_size\)=4294967295, larger"),
        ("llama.attention.head_count", 0, None, r"head_count \(num_attention_heads\)=0: sizes, layer and head counts"),
        ("llama.attention.head_count_kv", 0, None, r"head_count_kv \(num_key_value_heads\)=0"),
        ("llama.attention.head_count", -4, 5, r"head_count \(num_attention_heads\)=-4"),
        ("llama.embedding_length", -64, 5, r"embedding_length \(hidden_size\)=-64"),
    ],
)
def test_gguf_declared_sizes(tmp_path, f16_gguf, key, value, vtype, match):
    """Zero or negative heads once raised ZeroDivisionError; a 2^31 width was accepted without a word."""
    _open_fails(_write(tmp_path, set_scalar(f16_gguf, key, value, vtype)), match)


def test_gguf_sizes_the_model_code_refuses(tmp_path, f16_gguf):
    """transformers' config classes validate sizes with errors of their own types (a 64 wide model of 3 heads)."""
    _open_fails(_write(tmp_path, set_scalar(f16_gguf, "llama.attention.head_count", 3)),
                r"transformers refuses the config its metadata gives \(StrictDataclassClassValidationError: .* "
                r"ValueError: The hidden size \(64\) is not a multiple of the number of attention heads \(3\)")


def test_gguf_tensor_name_longer_than_any_writer_makes(tmp_path, f16_gguf):
    at = tensor_entry_at(f16_gguf, "blk.0.attn_q.weight") - len("blk.0.attn_q.weight") - 8
    data = bytearray(f16_gguf)
    struct.pack_into("<Q", data, at, 5000)
    _open_fails(_write(tmp_path, bytes(data)), rf"a tensor name at byte {at} declares 5000 bytes, more than the 1024")


def test_gguf_declared_sizes_through_weight_stats(tmp_path, f16_gguf):
    path = _write(tmp_path, set_scalar(f16_gguf, "llama.attention.head_count_kv", 0))
    with pytest.raises(CheckpointFileError, match=r"head_count_kv \(num_key_value_heads\)=0"):
        toolkit.weight_stats(path, metrics=["frobenius_norm"], progress=False, cache=False)


# -- GGUF: header counts ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_copy(tmp_path_factory, smollm2_path) -> Path:
    """A copy of the embedded 98 MB GGUF, to edit."""
    path = tmp_path_factory.mktemp("smollm2") / "copy.gguf"
    shutil.copyfile(smollm2_path, path)
    return path


def _patched(path: Path, at: int, fmt: str, value, dest: Path) -> Path:
    shutil.copyfile(path, dest)
    with open(dest, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack(fmt, value))
    return dest


@pytest.mark.parametrize(
    ("at", "fmt", "value", "match"),
    [
        (8, "<Q", 2**62, r"declares 33 metadata entries and 4611686018427387904 tensors, more than a file of "
         r"98362432 bytes can hold"),
        (16, "<Q", 2**62, r"declares 4611686018427387904 metadata entries"),
        (24, "<Q", 2**63, r"a metadata key at byte 24 declares 9223372036854775808 bytes, more than the \d+ left"),
        (24, "<Q", 2**64 - 1, r"a metadata key at byte 24 declares 18446744073709551615 bytes"),
    ],
)
def test_gguf_huge_counts_fail_fast_in_a_98_mb_file(tmp_path, smollm2_copy, at, fmt, value, match):
    """2^62 tensors or a 2^63-byte key once took 0.87 GB before a raw OverflowError."""
    path = _patched(smollm2_copy, at, fmt, value, tmp_path / "huge.gguf")
    tracemalloc.start()
    try:
        err = _open_fails(path, match)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak
    assert "re-download" in str(err) and err.path == str(path)


def test_gguf_huge_array_count(tmp_path, smollm2_copy):
    data = smollm2_copy.read_bytes()[:4096 * 1024]
    at = _key_value_at(data, "tokenizer.ggml.tokens") + 4 + 4  # value type, element type, then the count
    path = _patched(smollm2_copy, at, "<Q", 2**62, tmp_path / "array.gguf")
    _open_fails(path, r"an array at byte \d+ declares 4611686018427387904 elements, more than the \d+ bytes left")


def test_gguf_nested_arrays_and_alignment(tmp_path):
    from toolkit.sources.gguf.table import read_gguf_table

    nested = struct.pack("<IQ", 9, 1) * 40 + struct.pack("<IQ", 4, 0)  # arrays of arrays, 40 deep
    path = _write(tmp_path, gguf_bytes([("deep", 9, nested)]))
    with pytest.raises(CheckpointFileError, match="metadata arrays nested more than 8 deep"):
        read_gguf_table(path)
    for value in (0, 3, 48, 2**31):
        path = _write(tmp_path, gguf_bytes([("general.alignment", 4, struct.pack("<I", value))]))
        with pytest.raises(CheckpointFileError, match=rf"general\.alignment is {value}, not a power of two"):
            read_gguf_table(path)
    path = _write(tmp_path, gguf_bytes([("general.alignment", 8, _string("32"))]))
    with pytest.raises(CheckpointFileError, match=r"general\.alignment is '32', not a power of two"):
        read_gguf_table(path)
    fine = _write(tmp_path, gguf_bytes([("general.alignment", 4, struct.pack("<I", 64))]))
    assert read_gguf_table(fine).tensors == ()


@pytest.mark.parametrize(
    ("version", "match"),
    [
        (4, r"unsupported GGUF version 4 \(this toolkit reads versions 2 and 3\)"),
        (1, r"unsupported GGUF version 1 .*convert the model again with a current llama\.cpp"),
        (0x03000000, r"a big-endian GGUF file \(its version reads as 50331648, 3 byte-swapped\).*gguf_convert_endian"),
    ],
)
def test_gguf_version(tmp_path, f16_gguf, version, match):
    data = f16_gguf[:4] + struct.pack("<I", version) + f16_gguf[8:]
    err = _open_fails(_write(tmp_path, data), match)
    assert "truncated or corrupted" not in str(err)


# -- safetensors headers ---------------------------------------------------------------------------------------------


def safetensors_file(path: Path, header, data: bytes = b"", *, raw: bytes | None = None) -> Path:
    body = json.dumps(header).encode() if raw is None else raw
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("header", "data", "match"),
    [
        ([1, 2], b"", r"the header is a JSON list, not an object of tensor entries"),
        ("abc", b"", r"the header is a JSON str, not an object"),
        (5, b"", r"the header is a JSON int, not an object"),
        (None, b"", r"the header is a JSON NoneType"),
        ({"w": "x"}, b"\0" * 8, r"the entry of tensor 'w' is a JSON str, not an object"),
        ({"w": {**F32x2, "dtype": 5}}, b"\0" * 8, r"tensor 'w' has dtype 5, not a dtype of the format"),
        ({"w": {**F32x2, "dtype": None}}, b"\0" * 8, r"tensor 'w' has dtype None"),
        ({"w": {**F32x2, "dtype": "f32"}}, b"\0" * 8, r"tensor 'w' has dtype 'f32'"),
        ({"w": {**F32x2, "shape": "2"}}, b"\0" * 8, r"tensor 'w' has shape '2', not a list of non-negative integers"),
        ({"w": {**F32x2, "shape": [-2]}}, b"\0" * 8, r"shape \[-2\]"),
        ({"w": {**F32x2, "shape": [2.0]}}, b"\0" * 8, r"shape \[2\.0\]"),
        ({"w": {**F32x2, "shape": [True, 2]}}, b"\0" * 8, r"shape \[True, 2\]"),
        ({"w": {**F32x2, "data_offsets": [0, "8"]}}, b"\0" * 8, r"data_offsets \[0, '8'\], not \[begin, end\]"),
        ({"w": {**F32x2, "data_offsets": [8, 0]}}, b"\0" * 8, r"data_offsets \[8, 0\]"),
        ({"w": {**F32x2, "data_offsets": [0]}}, b"\0" * 8, r"data_offsets \[0\]"),
        ({"w": {**F32x2, "shape": [3]}}, b"\0" * 8, r"tensor 'w' \(F32, shape \[3\]\) needs 12 bytes, its "
         r"data_offsets \[0, 8\] hold 8"),
        ({"w": F32x2, "v": {**F32x2, "data_offsets": [4, 12]}}, b"\0" * 12, r"tensors 'w' and 'v' overlap"),
        ({"w": F32x2, "v": {**F32x2, "data_offsets": [12, 20]}}, b"\0" * 20, r"4 bytes between tensors 'w' and 'v' "
         "belong to no tensor"),
        ({"w": {**F32x2, "data_offsets": [4, 12]}}, b"\0" * 12, r"the first tensor, 'w', starts at byte 4"),
        ({"__metadata__": 5, "w": F32x2}, b"\0" * 8, r"'__metadata__' is not an object of strings"),
        ({"__metadata__": {"a": 1}, "w": F32x2}, b"\0" * 8, r"'__metadata__' is not an object of strings"),
        ({"w": F32x2}, b"\0" * 12, r"4 bytes follow the last tensor's data"),
        ({"w": F32x2}, b"\0" * 4, r"truncated: its header says the tensor data runs to byte \d+, the file has"),
    ],
)
def test_safetensors_header_that_is_not_the_format(tmp_path, header, data, match):
    path = safetensors_file(tmp_path / "model.safetensors", header, data)
    err = _open_fails(path, match)
    assert err.path == str(path) and "re-download" in str(err)


def test_safetensors_header_larger_than_the_format_allows(tmp_path):
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as fh:  # a sparse file: the header length is all that is read
        fh.write(struct.pack("<Q", 100_000_001) + b"{")
        fh.truncate(100_000_100)
    _open_fails(path, r"its header declares 100000001 bytes, more than the 100000000 bytes the safetensors format")


def test_safetensors_values_equal_safetensors(tmp_path):
    from safetensors.torch import save_file

    tensors = {
        "a": torch.randn(3, 5), "b": torch.randn(4, 2).to(torch.bfloat16), "c": torch.arange(7, dtype=torch.int64),
        "d": torch.zeros(0, 3), "e": torch.randn(2, 3).to(torch.float8_e4m3fn), "f": torch.tensor(2.5),
        "g": torch.tensor([True, False]), "h": torch.arange(6, dtype=torch.int32).reshape(2, 3).to(torch.uint16),
    }
    save_file(tensors, tmp_path / "model.safetensors")
    records = {r.name: r for r in open_source(tmp_path / "model.safetensors").tensors()}
    assert set(records) == set(tensors)
    for name, expected in tensors.items():
        got = records[name].read()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert torch.equal(got.reshape(-1).view(torch.uint8), expected.reshape(-1).view(torch.uint8)), name
        assert records[name].shape == tuple(expected.shape)
    blocks = list(records["a"].row_blocks(max_entries=5))
    assert len(blocks) == 3 and torch.equal(torch.cat(blocks), tensors["a"])


def test_safetensors_header_parsed_once_per_pass(tmp_path, monkeypatch):
    """Each tensor read once re-opened the shard and parsed its header: 54 s with a 1M-entry header."""
    import safetensors

    import toolkit.sources.safetensors_ as st_mod

    n = 20_000  # a header of many entries: one parse per pass is counted, not timed
    header = {f"t{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
    header["w"] = {"dtype": "F32", "shape": [8, 4], "data_offsets": [4 * n, 4 * n + 128]}
    weights = torch.randn(8, 4)
    path = safetensors_file(tmp_path / "model.safetensors", header,
                            torch.arange(n, dtype=torch.float32).numpy().tobytes() + weights.numpy().tobytes())
    calls = {"header": 0, "safe_open": 0}
    real_header, real_safe_open = st_mod.read_header, safetensors.safe_open

    def counted_header(*a):
        calls["header"] += 1
        return real_header(*a)

    def counted_safe_open(*a, **k):
        calls["safe_open"] += 1
        return real_safe_open(*a, **k)

    monkeypatch.setattr(st_mod, "read_header", counted_header)
    monkeypatch.setattr(safetensors, "safe_open", counted_safe_open)
    src = open_source(path)
    assert calls == {"header": 1, "safe_open": 1}  # the safetensors library checks the header once
    total = 0.0
    for rec in src.tensors():
        if rec.name == "w":
            assert torch.equal(rec.read(), weights)
        elif rec.name in ("t0", "t19999", "t4321"):
            total += float(rec.read())
    assert total == 19999 + 4321
    assert calls == {"header": 1, "safe_open": 1}  # the pass parsed nothing again


def test_safetensors_file_cut_after_open(tmp_path, tiny_qwen2):
    folder = shutil.copytree(tiny_qwen2[1]["single"], tmp_path / "m")
    records = list(open_source(folder).tensors())
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(CheckpointFileError, match=r"is cut short \(\d+ of \d+ bytes\): the file changed or was "
                       "truncated after it was opened"):
        for rec in records:
            rec.read()


# -- sharded indexes -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharded_llama(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("sharded") / "m", "llama", num_layers=2,
                                 max_shard_size="20KB")


@pytest.mark.parametrize(
    ("where", "match"),
    [
        ("../other/{shard}", r"a path that leads out of the checkpoint's folder"),
        ("sub/../../other/{shard}", r"a path that leads out of the checkpoint's folder"),
        ("{absolute}", r"an absolute path: shards must lie in the checkpoint's folder"),
        (None, r"which is not a file name"),
        (7, r"which is not a file name"),
        ("", r"which is not a file name"),
    ],
)
def test_index_pointing_outside_the_folder_is_refused(tmp_path, sharded_llama, where, match):
    folder = shutil.copytree(sharded_llama, tmp_path / "ckpt" / "m")
    other = shutil.copytree(sharded_llama, tmp_path / "ckpt" / "other")  # the file it points to exists
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name, shard = next(iter(index["weight_map"].items()))
    if isinstance(where, str):
        where = where.format(shard=shard, absolute=str(other / shard))
    index["weight_map"][name] = where
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    err = _open_fails(folder, rf"the weight_map puts tensor '{name}' in .*{match}")
    assert err.path.endswith("model.safetensors.index.json") and "re-download or re-save" in str(err)


def test_bin_index_pointing_outside_the_folder_is_refused(tmp_path, tiny_qwen2):
    folder = shutil.copytree(tiny_qwen2[1]["bin_sharded"], tmp_path / "m")
    index_path = folder / "pytorch_model.bin.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = {k: "/etc/" + v for k, v in index["weight_map"].items()}
    index_path.write_text(json.dumps(index))
    _open_fails(folder, r"an absolute path")


# -- complex weights -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_weights_in_a_bin_file_are_refused(tmp_path, dtype):
    torch.save({"w": torch.randn(4, 4, dtype=dtype)}, tmp_path / "pytorch_model.bin")
    (rec,) = open_source(tmp_path / "pytorch_model.bin").tensors()
    assert rec.dtype == str(dtype).removeprefix("torch.")
    with pytest.raises(UnsupportedDtypeError, match=r"tensor 'w' is stored as complex(64|128): complex weights are "
                       r"not measured .*imaginary part.*view_as_real") as info:
        rec.read()
    assert info.value.tensor == "w" and info.value.path.endswith("pytorch_model.bin")


def test_complex_component_in_safetensors_stops_weight_stats(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    state = load_file(folder / "model.safetensors")
    name = "model.layers.1.self_attn.q_proj.weight"
    state[name] = state[name].to(torch.complex64) * (1 + 1j)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedDtypeError, match=rf"tensor '{name}' is stored as complex64"):
        toolkit.weight_stats(folder, metrics=["frobenius_norm"], progress=False, cache=False)
    rows = next(r for r in open_source(folder).tensors() if r.name == name).row_blocks(max_entries=32 * 4)
    with pytest.raises(UnsupportedDtypeError):
        next(iter(rows))


# -- config sizes ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def neox(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("neox") / "m", "gpt_neox", num_layers=2)


@pytest.mark.parametrize("heads", [0, -4, "4", 2.5, True, None, [4]])
def test_gpt_neox_heads_in_config_json(tmp_path, neox, heads):
    """Zero heads once raised ZeroDivisionError (the per-head split divides by the head count)."""
    folder = shutil.copytree(neox, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["num_attention_heads"] = heads
    (folder / "config.json").write_text(json.dumps(config))
    if heads is None:  # unknown: the split says which size it lacks
        error, match = MappingError, r"gpt_neox: attention\.query_key_value': the config lacks a size this split needs"
    elif isinstance(heads, list):  # a per-layer list is a config's business, but no single head count
        error, match = MappingError, r"the config declares num_attention_heads=\[4\]; sizes, layer and head counts"
    else:
        error, match = CheckpointFileError, r"config\.json': the config declares num_attention_heads=" + re.escape(
            repr(heads)) + ".*: sizes, layer and head counts must be positive integers"
    with pytest.raises(error, match=match):
        toolkit.weight_stats(folder, metrics=["frobenius_norm"], progress=False, cache=False)


@pytest.mark.parametrize("family", sorted(set(TINY_FAMILIES) & set(registered_architectures())))
@pytest.mark.parametrize("key", ["num_attention_heads", "hidden_size", "num_key_value_heads", "intermediate_size",
                                 "num_hidden_layers", "head_dim"])
def test_every_family_refuses_zero_or_negative_sizes(family, key):
    config = tiny_config(family, num_layers=2).to_dict()
    config.setdefault("model_type", family)
    for value in (0, -2):
        with pytest.raises(MappingError, match=rf"the config declares {key}={value}; sizes, layer and head counts "
                           "must be positive integers"):
            resolve_adapter({**config, key: value})


def test_hand_made_split_with_zero_heads():
    from toolkit.architectures import Dims, Split

    split = Split(("attn.q", "attn.k", "attn.v"), lambda d: (d.hidden_size // d.num_attention_heads,) * 3)
    with pytest.raises(MappingError, match="the config's sizes cannot give this split"):
        split.indices(Dims(hidden_size=32, num_attention_heads=0), "qkv")


# -- source arguments ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (42, r"cannot open checkpoint 42: a int is not a checkpoint: pass a hub id \('org/name'\), a local path"),
        (3.5, r"a float is not a checkpoint"),
        (object(), r"a object is not a checkpoint"),
        (b"org/name", r"cannot open checkpoint b'org/name': bytes are not a path or a hub id; decode them first"),
        (bytearray(b"x"), r"bytes are not a path"),
        (["a", "b"], r"a list is not one checkpoint: open one at a time .*compare_series"),
        (("a",), r"a tuple is not one checkpoint"),
        ({"a": 1}, r"a dict is not one checkpoint"),
        (iter(["a"]), r"is not one checkpoint"),
    ],
)
def test_open_source_of_the_wrong_type(source, match):
    with pytest.raises(SourceTypeError, match=match) as info:
        open_source(source)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ToolkitError)


@pytest.mark.parametrize("source", [b"org/name", "org/name\n"])
def test_weight_stats_of_the_wrong_source(source, hf_cache):
    with pytest.raises(ToolkitError, match="cannot open checkpoint"):
        toolkit.weight_stats(source, progress=False, cache=False)


def test_open_source_options_of_the_wrong_type(tiny_gguf_dir):
    """An option of the wrong type is an InvalidOptionError naming the option, not a 'cannot open checkpoint'."""
    from toolkit.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=r"gguf_file=3 is not valid: gguf_file must be None or a non-empty "
                       r"str"):
        open_source(tiny_gguf_dir, gguf_file=3)
    with pytest.raises(InvalidOptionError, match=r"revision=\[.main.\] is not valid: revision must be None or a "
                       r"non-empty str"):
        open_source("org/name", revision=["main"])


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("org/name\n", r"'org/name\\n': it has leading or trailing whitespace .*open_source\('org/name'\)"),
        ("  org/name", r"leading or trailing whitespace"),
        ("a" * 500, r"not a valid hub id: a hub name is at most 96 characters, this one has 500"),
        ("org/" + "b" * 97, r"at most 96 characters, this one has 97"),
        ("org/name-", r"not a valid hub id: 'name-': a hub name .* does not start or end with '-' or '\.'"),
        ("org--x/name", r"not a valid hub id: a hub id cannot contain '--' or '\.\.'"),
        ("org/name.git", r"cannot end with '\.git'"),
    ],
)
def test_hub_ids_the_hub_would_refuse(source, match, hf_cache):
    with pytest.raises(SourceNotFoundError, match=match):
        open_source(source)


def test_existing_path_with_a_stray_newline(tiny_gguf_dir):
    with pytest.raises(SourceNotFoundError, match=r"leading or trailing whitespace"):
        open_source(str(tiny_gguf_dir / "f16.gguf") + "\n")


# -- unreadable files ------------------------------------------------------------------------------------------------


@pytest.fixture
def unreadable(monkeypatch):
    """``unreadable(path)``: opening ``path`` fails as a file without read permission does (we may run as root)."""
    blocked: set[str] = set()
    real_open = builtins.open

    def guarded(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and str(Path(file).resolve()) in blocked:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    return lambda path: blocked.add(str(Path(path).resolve()))


@pytest.mark.parametrize("kind", ["safetensors", "bin", "gguf", "config"])
def test_unreadable_weight_file(tmp_path, tiny_qwen2, tiny_gguf_dir, unreadable, kind):
    if kind == "gguf":
        path = shutil.copyfile(tiny_gguf_dir / "f16.gguf", tmp_path / "m.gguf")
        blocked = path
    else:
        path = shutil.copytree(tiny_qwen2[1]["single" if kind != "bin" else "bin"], tmp_path / "m")
        blocked = path / {"safetensors": "model.safetensors", "bin": "pytorch_model.bin", "config": "config.json"}[kind]
    unreadable(blocked)
    with pytest.raises(CheckpointFileError, match=r"PermissionError.*check its permissions|Permission denied") as info:
        open_source(path)
    assert info.value.path == str(blocked)


def test_weight_file_unreadable_after_open(tmp_path, tiny_qwen2, unreadable):
    folder = shutil.copytree(tiny_qwen2[1]["single"], tmp_path / "m")
    rec = next(iter(open_source(folder).tensors()))
    unreadable(folder / "model.safetensors")
    with pytest.raises(CheckpointFileError, match=r"cannot read tensor .*PermissionError"):
        rec.read()


# -- siblings: configs, mappings, dtypes and errors ------------------------------------------------------------------


@pytest.mark.parametrize("model_type", [["llama"], {"a": 1}, 5, None])
def test_model_type_that_is_no_name(model_type):
    from toolkit.errors import UnsupportedArchitectureError

    with pytest.raises(UnsupportedArchitectureError, match=r"no component mapping for model_type"):
        resolve_adapter({"model_type": model_type, "num_hidden_layers": 2}, ["x.weight"])


@pytest.mark.parametrize("config", [None, 42, ["llama"], "llama"])
def test_config_that_is_no_dict(config):
    with pytest.raises(MappingError, match=r"the config must be a dict \(a config\.json's content\), not a"):
        resolve_adapter(config)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(patterns=42), r"patterns must be a dict \{component: regex\} of strings, not a int \(42\)"),
        (dict(patterns={"attn.q": 5}), r"patterns must be a dict .* not a dict \(\{'attn\.q': 5\}\)"),
        (dict(patterns={}, fused=[1]), r"fused must be a dict \{regex: Split\(\.\.\.\)\}, not a list"),
        (dict(patterns={}, transpose=5), r"transpose must be a list of components or patterns, not a int"),
        (dict(patterns={}, num_layers=0), r"num_layers must be a positive integer or None, not 0"),
        (dict(patterns={}, num_layers="2"), r"num_layers must be a positive integer or None, not '2'"),
        (dict(patterns={}, name=None), r"name must be a str, not a NoneType"),
    ],
)
def test_mapping_arguments_of_the_wrong_type(kwargs, match):
    with pytest.raises(MappingError, match=match):
        toolkit.Mapping(**kwargs)


def test_mapping_transpose_given_as_one_string():
    m = toolkit.Mapping({"attn.q": r"blocks\.(\d+)\.wq\.weight"}, transpose="attn.q")
    (piece,) = m.adapter({}).pieces("blocks.0.wq.weight")
    assert torch.equal(piece.extract(torch.arange(6.0).reshape(2, 3)), torch.arange(6.0).reshape(2, 3).t())


def test_config_json_with_odd_architectures_still_opens(tmp_path, tiny_qwen2):
    folder = shutil.copytree(tiny_qwen2[1]["single"], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = 5
    (folder / "config.json").write_text(json.dumps(config))
    assert len(list(open_source(folder).tensors())) > 10


def test_safetensors_packed_dtype_is_refused_on_read(tmp_path):
    path = safetensors_file(tmp_path / "model.safetensors", {"w": {"dtype": "F4", "shape": [2, 4],
                                                                   "data_offsets": [0, 4]}}, b"\x11" * 4)
    (rec,) = open_source(path).tensors()
    with pytest.raises(UnsupportedDtypeError, match=r"tensor 'w' is stored as F4: a packed dtype of fewer than 8 bits"):
        rec.read()


def test_gguf_quantised_tensor_without_dimensions(tmp_path, tiny_gguf_dir):
    data = (tiny_gguf_dir / "q8_0.gguf").read_bytes()
    at = tensor_entry_at(data, "blk.1.attn_v.weight")
    (n,) = struct.unpack_from("<I", data, at)
    # ndim 0: the dims vanish and type + offset move up (the entry shrinks by 16 bytes, the header with it)
    entry = struct.pack("<I", 0) + data[at + 4 + 8 * n:at + 4 + 8 * n + 12]
    edited = data[:at] + entry + data[at + 4 + 8 * n + 12:]
    _open_fails(_write(tmp_path, edited), r"tensor 'blk\.1\.attn_v\.weight' has no dimensions but a quantised type")


def test_new_errors_survive_pickling():
    import pickle

    cases = [
        SourceTypeError(42, "pass a path"),
        UnsupportedDtypeError("/m/model.safetensors", "w", "complex64", "complex weights are not measured"),
    ]
    for exc in cases:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and again.args == exc.args and vars(again) == vars(exc)
        assert str(again) == str(exc)
