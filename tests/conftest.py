"""Shared fixtures.

Sources: the bundled real models (paths only; each test module loads the
``transformers`` reference it needs once), tiny checkpoints written by
``transformers`` itself (safetensors single/sharded, ``.bin`` single/sharded),
tiny GGUF files written with ``gguf.GGUFWriter``, and a Hugging Face cache laid
out on disk as ``huggingface_hub`` lays it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

# ----------------------------------------------------------------- sources --

TINY_QWEN2 = dict(
    vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The bundled SmolLM2-135M-Instruct Q4_1 GGUF (llama, 30 layers, tied embeddings)."""
    from toolkit.bundled import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """The bundled Gemma-3-270m Q4_K_M GGUF (gemma3_text, 18 layers, mixed quantisations)."""
    from toolkit.bundled import gemma3_path

    return gemma3_path()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The bundled all-MiniLM-L6-v2 folder (BERT, float32 safetensors)."""
    from toolkit.bundled import minilm_dir

    return minilm_dir()


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory):
    """A 3-layer Qwen2 in bfloat16, saved four ways.

    Returns ``(state_dict, folders)`` with folders ``"single"``
    (model.safetensors), ``"sharded"`` (index + shards), ``"bin"``
    (pytorch_model.bin) and ``"bin_sharded"`` (index + .bin shards, written
    by hand: transformers 5 only saves safetensors).
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)).to(torch.bfloat16)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    root = tmp_path_factory.mktemp("tiny_qwen2")
    folders = {name: root / name for name in ("single", "sharded", "bin", "bin_sharded")}
    model.save_pretrained(folders["single"])
    model.save_pretrained(folders["sharded"], max_shard_size="20KB")
    for name in ("bin", "bin_sharded"):
        folders[name].mkdir()
        shutil.copy(folders["single"] / "config.json", folders[name] / "config.json")
    torch.save(state, folders["bin"] / "pytorch_model.bin")
    names = list(state)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        shard = f"pytorch_model-0000{i + 1}-of-00002.bin"
        torch.save({k: state[k] for k in part}, folders["bin_sharded"] / shard)
        weight_map.update({k: shard for k in part})
    (folders["bin_sharded"] / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return state, folders


def write_tiny_llama_gguf(path: Path, kind: str = "F16", *, tied: bool = True, extra: bool = False) -> dict:
    """Write a 2-layer llama GGUF the way llama.cpp's converter lays it out.

    ``kind`` is the storage type of the matrices (``"F16"``, ``"BF16"``,
    ``"Q8_0"``, ``"F32"``); norms are F32. q/k are stored permuted as
    llama.cpp permutes them. ``extra`` adds a ``rope_freqs.weight`` tensor that
    ``transformers`` does not load. Returns the HF-named float32 tensors
    (before permutation and quantisation).
    """
    import gguf
    from gguf import GGMLQuantizationType as T

    hidden, heads, kv_heads, ffn, vocab, layers = 64, 4, 2, 96, 64, 2
    head_dim = hidden // heads
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(layers)
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(vocab)])

    def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.LlamaModel.permute
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    def add(name, array, quantised=True):
        array = array.astype(np.float32)
        qtype = T[kind] if quantised else T.F32
        if qtype == T.F32:
            writer.add_tensor(name, array)
        elif qtype == T.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)

    hf = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden))}
    add("token_embd.weight", hf["model.embed_tokens.weight"])
    for b in range(layers):
        p = f"model.layers.{b}."
        w = {
            "self_attn.q_proj": rng.standard_normal((hidden, hidden)),
            "self_attn.k_proj": rng.standard_normal((kv_heads * head_dim, hidden)),
            "self_attn.v_proj": rng.standard_normal((kv_heads * head_dim, hidden)),
            "self_attn.o_proj": rng.standard_normal((hidden, hidden)),
            "mlp.gate_proj": rng.standard_normal((ffn, hidden)),
            "mlp.up_proj": rng.standard_normal((ffn, hidden)),
            "mlp.down_proj": rng.standard_normal((hidden, ffn)),
        }
        hf.update({p + k + ".weight": v for k, v in w.items()})
        hf[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
        hf[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
        add(f"blk.{b}.attn_norm.weight", hf[p + "input_layernorm.weight"], quantised=False)
        add(f"blk.{b}.attn_q.weight", permute(w["self_attn.q_proj"], heads))
        add(f"blk.{b}.attn_k.weight", permute(w["self_attn.k_proj"], kv_heads))
        add(f"blk.{b}.attn_v.weight", w["self_attn.v_proj"])
        add(f"blk.{b}.attn_output.weight", w["self_attn.o_proj"])
        add(f"blk.{b}.ffn_norm.weight", hf[p + "post_attention_layernorm.weight"], quantised=False)
        add(f"blk.{b}.ffn_gate.weight", w["mlp.gate_proj"])
        add(f"blk.{b}.ffn_up.weight", w["mlp.up_proj"])
        add(f"blk.{b}.ffn_down.weight", w["mlp.down_proj"])
    hf["model.norm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
    add("output_norm.weight", hf["model.norm.weight"], quantised=False)
    if not tied:
        hf["lm_head.weight"] = rng.standard_normal((vocab, hidden))
        add("output.weight", hf["lm_head.weight"])
    if extra:
        add("rope_freqs.weight", np.ones(head_dim // 2), quantised=False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in hf.items()}


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory) -> Path:
    """A folder of tiny llama GGUFs: ``f16.gguf``, ``bf16.gguf``, ``q8_0.gguf``
    (tied) and ``untied.gguf`` (F32, own ``output.weight``, a ``rope_freqs`` tensor)."""
    folder = tmp_path_factory.mktemp("tiny_gguf")
    for kind in ("F16", "BF16", "Q8_0"):
        write_tiny_llama_gguf(folder / f"{kind.lower()}.gguf", kind)
    write_tiny_llama_gguf(folder / "untied.gguf", "F32", tied=False, extra=True)
    return folder


def make_hf_cache(cache: Path, repo_id: str, files: dict[str, Path], commit: str = "a" * 40) -> Path:
    """Lay ``files`` out as ``huggingface_hub`` caches a download of ``repo_id``.

    ``<cache>/models--org--name/blobs/<sha256>`` holds the bytes,
    ``snapshots/<commit>/<name>`` links to the blob, ``refs/main`` holds the
    commit. Returns the snapshot folder.
    """
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        data = Path(src).read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(name="make_hf_cache")
def make_hf_cache_fixture():
    """:func:`make_hf_cache`, as a fixture (test modules need not import conftest)."""
    return make_hf_cache


@pytest.fixture(name="write_tiny_llama_gguf")
def write_tiny_llama_gguf_fixture():
    """:func:`write_tiny_llama_gguf`, as a fixture."""
    return write_tiny_llama_gguf


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty HF cache folder set as ``HF_HUB_CACHE``, hub switched off."""
    cache = tmp_path / "hf_cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh result cache folder for the test (``$TOOLKIT_CACHE_DIR``)."""
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def reads(monkeypatch):
    """The names of the tensors read (``TensorRecord.read`` calls), in order."""
    from toolkit.sources.base import TensorRecord

    names = []
    original = TensorRecord.read

    def counting(self):
        names.append(self.name)
        return original(self)

    monkeypatch.setattr(TensorRecord, "read", counting)
    return names


# ------------------------------------------------------------- fast loop --

#: Modules whose tests run a real model end to end, a notebook, a wheel build or a fuzz campaign: marked
#: ``slow``, so ``make test-fast`` (``-m "not slow and not browser"``) leaves them out; ``make test`` runs all.
SLOW_MODULES = {
    "test_notebook_01", "test_notebook_02", "test_notebook_03", "test_lab_notebook", "test_weightwatcher_golden",
    "test_fuzz_configs", "test_fuzz_sources", "test_properties", "test_activations_smollm2", "test_sources_gguf",
    "test_packaged_data", "test_float32_certified", "test_probe_headless_encoder", "test_distributed",
    "test_notebook_05",
    # subprocesses, trainings or large declared shapes: seconds a test
    "test_lab_train", "test_lab_presets", "test_hostile_quantized", "test_hostile_architectures", "test_hostile_inputs",
    "test_collect_stream", "test_cache_adversarial", "test_hostile_network",
}
#: Fixtures of the bundled real models: a test that takes one is slow too.
REAL_MODEL_FIXTURES = {"smollm2_path", "gemma3_path", "minilm_dir"}


#: Modules that take the longest (a notebook or a real model's reference load: 15-80 s each on 2 cores), run
#: first: ``make test`` hands whole modules to two pytest-xdist workers in collection order (``--dist loadfile
#: --no-loadscope-reorder``), so the longest start first and the many short modules fill in after them (the
#: longest-first rule of list scheduling), instead of one worker finishing a notebook while the other waits.
LONGEST_FIRST = ("test_notebook_02", "test_notebook_05", "test_notebook_06", "test_lab_notebook", "test_sources_gguf",
                 "test_notebook_03", "test_notebook_01",
                 # the browser tests' own run (``-m browser``): 50 s a module
                 "test_browser", "test_browser_live", "test_browser_explorer")


def _module(item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _module(item) in SLOW_MODULES or REAL_MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank)))  # stable: the rest keep their order
