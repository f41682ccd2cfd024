"""Safetensors and ``.bin`` sources: single files, shards, renamings, fingerprints.

MiniLM finding: ``all-MiniLM-L6-v2``'s ``model.safetensors`` stores exactly the
names ``BertModel`` (what ``AutoModel`` builds from its config) uses, with no
``bert.`` prefix, plus ``embeddings.position_ids``, an int64 buffer that
``transformers`` no longer keeps in the state dict (non-persistent). The
source yields it like every stored tensor (dtype ``"int64"``); the
architecture adapter ignores it.
"""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import save_file

from toolkit.sources import open_source
from toolkit.sources.identity import hub_sha256

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _records(source):
    return {r.name: r for r in source.tensors()}


def test_minilm_equals_transformers_automodel(minilm_dir):
    from transformers import AutoModel

    source = open_source(minilm_dir)
    model = AutoModel.from_pretrained(str(minilm_dir))
    state_dict = model.state_dict()
    records = _records(source)
    assert type(model).__name__ == "BertModel"
    assert set(records) - set(state_dict) == {"embeddings.position_ids"}
    assert set(state_dict) <= set(records)
    for name, tensor in state_dict.items():
        got = records[name].read()
        assert records[name].dtype == "float32" and got.dtype == torch.float32
        assert got.shape == tensor.shape and torch.equal(got, tensor), name
    assert records["embeddings.position_ids"].dtype == "int64"
    cfg = source.config
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["hidden_size"],
            cfg["intermediate_size"]) == ("bert", 6, 12, 384, 1536)
    assert (cfg["num_key_value_heads"], cfg["head_dim"]) == (12, 32)  # BertConfig has neither: plain MHA
    assert source.format == "safetensors" and source.files() == [str(minilm_dir / "model.safetensors")]


@pytest.mark.parametrize("layout, fmt, n_files", [
    ("single", "safetensors", 1), ("sharded", "safetensors", None),
    ("bin", "pytorch", 1), ("bin_sharded", "pytorch", 2),
])
def test_tiny_qwen2_every_layout_keeps_names_values_and_bf16(tiny_qwen2, layout, fmt, n_files):
    state, folders = tiny_qwen2
    source = open_source(folders[layout])
    records = _records(source)
    assert source.format == fmt
    assert set(records) == set(state)
    for name, tensor in state.items():
        rec = records[name]
        got = rec.read()
        assert rec.dtype == "bfloat16" and got.dtype == torch.bfloat16, name
        assert rec.shape == tuple(tensor.shape) and torch.equal(got, tensor), name
    files = source.files()
    assert len(files) == (n_files or len(files)) and all(os.path.isfile(f) for f in files)
    if layout == "sharded":
        assert len(files) > 1
    cfg = source.config
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        "qwen2", 3, 2, 8)


def test_tiny_qwen2_names_are_those_transformers_loads(tiny_qwen2):
    from transformers import AutoModelForCausalLM

    state, folders = tiny_qwen2
    loaded = AutoModelForCausalLM.from_pretrained(str(folders["sharded"])).state_dict()
    assert set(_records(open_source(folders["sharded"]))) == set(loaded)


def test_single_file_and_index_paths_open_directly(tiny_qwen2):
    _, folders = tiny_qwen2
    assert len(_records(open_source(folders["single"] / "model.safetensors"))) == len(
        _records(open_source(folders["sharded"] / "model.safetensors.index.json")))
    assert open_source(folders["bin"] / "pytorch_model.bin").format == "pytorch"
    assert open_source(folders["bin_sharded"] / "pytorch_model.bin.index.json").config["model_type"] == "qwen2"


def test_legacy_gamma_beta_names_get_transformers_renaming(tmp_path):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=16))
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in model.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    model.config.save_pretrained(tmp_path)
    records = _records(open_source(tmp_path))
    loaded = BertModel.from_pretrained(str(tmp_path)).state_dict()
    assert set(records) == set(loaded)
    rec = records["embeddings.LayerNorm.weight"]
    assert rec.stored_name == "embeddings.LayerNorm.gamma"
    assert torch.equal(rec.read(), loaded["embeddings.LayerNorm.weight"])


def test_fingerprint_follows_the_weight_files(tiny_qwen2, tmp_path):
    _, folders = tiny_qwen2
    first = open_source(folders["single"]).fingerprint
    assert open_source(folders["single"]).fingerprint == first
    assert open_source(folders["sharded"]).fingerprint != first
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in ("config.json", "model.safetensors"):
        (copy / f).write_bytes((folders["single"] / f).read_bytes())
    before = open_source(copy).fingerprint
    st = os.stat(copy / "model.safetensors")
    os.utime(copy / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert open_source(copy).fingerprint != before
    assert hub_sha256(copy / "model.safetensors") == ""


def test_records_are_lazy(tiny_qwen2, monkeypatch):
    import toolkit.sources.safetensors_ as st_mod

    calls = []
    real = st_mod._read_tensor
    monkeypatch.setattr(st_mod, "_read_tensor", lambda f, n, *a: calls.append(n) or real(f, n, *a))
    _, folders = tiny_qwen2
    # records bind the reader when yielded, so patch before listing
    records = list(open_source(folders["single"]).tensors())
    assert calls == []
    records[0].read()
    assert calls == [records[0].name]


def test_a_sharded_bin_read_from_many_threads_gives_every_stored_tensor(tiny_qwen2):
    """A pass reads ahead on threads: reads of a sharded .bin interleaved across shards from 8 threads each give
    the tensor torch.load gives (one thread swapping the open shard once left another reading None)."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    state, folders = tiny_qwen2
    src = open_source(folders["bin_sharded"])
    records = [r for r in src.tensors() if r.name in state] * 6
    random.Random(0).shuffle(records)  # consecutive reads hop between the two shards
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda r: (r.name, r.read()), records))
    assert len(got) == len(records) > 12
    for name, tensor in got:
        torch.testing.assert_close(tensor, state[name].to(tensor.dtype), rtol=0, atol=0)
