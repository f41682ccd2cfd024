"""The zip layout of a ``.bin`` checked as a format: deflated records read exactly as ``torch.load`` reads them,
every other layout it cannot read refused with a typed error that says how to re-save (issue 35, class 1)."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import toolkit
from toolkit.errors import CheckpointFileError
from toolkit.sources.torch_bin import load_state_dict


def rezip(src: Path, dest: Path, method: int = zipfile.ZIP_DEFLATED, level: int | None = None) -> Path:
    """``src`` rewritten record by record with ``method`` (as a tool that rewrites zips does)."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dest, "w", method, compresslevel=level) as out:
        for info in z.infolist():
            out.writestr(info.filename, z.read(info.filename))
    return dest


@pytest.fixture
def deflated(tiny_qwen2, tmp_path) -> Path:
    """The tiny Qwen2 ``.bin`` folder with every zip record deflated (default level)."""
    folder = tmp_path / "deflated"
    shutil.copytree(tiny_qwen2[1]["bin"], folder)
    rezip(tiny_qwen2[1]["bin"] / "pytorch_model.bin", folder / "pytorch_model.bin")
    return folder


def test_a_deflated_bin_reads_torch_loads_values(deflated):
    ref = torch.load(deflated / "pytorch_model.bin", weights_only=True)
    src = toolkit.open_source(deflated)
    for record in src.tensors():
        assert torch.equal(record.read(), ref[record.stored_name or record.name])


@pytest.mark.parametrize("level", [1, 9])
def test_weight_stats_of_a_deflated_bin_equal_torch_load(tiny_qwen2, tmp_path, level):
    folder = tmp_path / "d"
    shutil.copytree(tiny_qwen2[1]["bin"], folder)
    rezip(tiny_qwen2[1]["bin"] / "pytorch_model.bin", folder / "pytorch_model.bin", level=level)
    ds = toolkit.weight_stats(folder, ["frobenius_norm"], progress=False, cache=False, layers=[1],
                              components=["attn.q", "mlp.down"])
    ref = torch.load(folder / "pytorch_model.bin", weights_only=True)
    for comp, key in (("attn.q", "self_attn.q_proj"), ("mlp.down", "mlp.down_proj")):
        want = torch.linalg.matrix_norm(ref[f"model.layers.1.{key}.weight"].double()).item()
        got = float(ds.frobenius_norm.sel(layer=1, component=comp))
        assert got == pytest.approx(want, rel=1e-5)


def _patch(path: Path, edit) -> Path:
    data = bytearray(path.read_bytes())
    edit(data)
    path.write_bytes(bytes(data))
    return path


def _local_headers(data: bytes) -> list[int]:
    out, at = [], data.find(b"PK\x03\x04")
    while at >= 0:
        out.append(at)
        at = data.find(b"PK\x03\x04", at + 4)
    return out


def _central_headers(data: bytes) -> list[int]:
    out, at = [], data.find(b"PK\x01\x02")
    while at >= 0:
        out.append(at)
        at = data.find(b"PK\x01\x02", at + 4)
    return out


def _set_flags(data: bytearray, bit: int) -> None:
    for at in _local_headers(data):
        struct.pack_into("<H", data, at + 6, struct.unpack_from("<H", data, at + 6)[0] | bit)
    for at in _central_headers(data):
        struct.pack_into("<H", data, at + 8, struct.unpack_from("<H", data, at + 8)[0] | bit)


def _local_method(data: bytearray, method: int) -> None:
    struct.pack_into("<H", data, _local_headers(data)[3] + 8, method)


def _local_size(data: bytearray, size: int) -> None:
    struct.pack_into("<I", data, _local_headers(data)[3] + 18, size)


def _local_name(data: bytearray, _=None) -> None:
    at = _local_headers(data)[3] + 30
    data[at] = ord("X")


@pytest.mark.parametrize("edit, match", [
    (lambda d: _set_flags(d, 0x1), "is encrypted"),
    (_local_method, "local header says"),
    (lambda d: _local_size(d, 12345), "local header gives sizes"),
    (_local_name, "local header says"),
])
def test_zip_layouts_that_cannot_be_read_are_refused_saying_how_to_resave(tiny_qwen2, tmp_path, edit, match):
    # rewritten stored (zipfile puts the sizes in the local header; torch's writer uses data descriptors)
    path = rezip(tiny_qwen2[1]["bin"] / "pytorch_model.bin", tmp_path / "pytorch_model.bin", zipfile.ZIP_STORED)
    assert torch.equal(load_state_dict(path)["lm_head.weight"], tiny_qwen2[0]["lm_head.weight"])
    if edit is _local_method:
        _patch(Path(path), lambda d: edit(d, 8))
    else:
        _patch(Path(path), edit)
    with pytest.raises(CheckpointFileError, match=match) as err:
        load_state_dict(Path(path))
    assert "torch.save(torch.load(path, weights_only=True), path)" in str(err.value)


def test_a_compression_method_torch_cannot_read_is_refused(tiny_qwen2, tmp_path):
    path = rezip(tiny_qwen2[1]["bin"] / "pytorch_model.bin", tmp_path / "pytorch_model.bin", zipfile.ZIP_BZIP2)
    with pytest.raises(CheckpointFileError, match="zip method 12.*Re-save it"):
        load_state_dict(path)
