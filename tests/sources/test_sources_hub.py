"""Hub ids, resolved from a real on-disk Hugging Face cache layout.

The hub cannot be reached from here, so every test builds the cache the way
``huggingface_hub`` writes it (``models--org--name/{blobs,snapshots,refs}``)
in a temporary folder set as ``HF_HUB_CACHE``, and runs with
``HF_HUB_OFFLINE=1`` - or online against a closed local port, to exercise the
"unreachable" path without network traffic.
"""

from __future__ import annotations

import pytest
import torch

from toolkit.errors import HubUnreachableError, SourceNotFoundError
from toolkit.sources import open_source
from toolkit.sources.hub import _wanted_files, looks_like_hub_id
from toolkit.sources.identity import hub_sha256

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cached_qwen2(tiny_qwen2, hf_cache, make_hf_cache):
    state, folders = tiny_qwen2
    files = {p.name: p for p in folders["sharded"].iterdir()}
    make_hf_cache(hf_cache, "org/tiny-qwen2", files, COMMIT)
    return state


def test_offline_hub_id_opens_the_cached_snapshot(cached_qwen2):
    source = open_source("org/tiny-qwen2")
    assert (source.location, source.revision, source.format) == ("org/tiny-qwen2", COMMIT, "safetensors")
    assert all(f"/snapshots/{COMMIT}/" in f for f in source.files())
    assert all(len(hub_sha256(f)) == 64 for f in source.files())
    records = {r.name: r for r in source.tensors()}
    assert set(records) == set(cached_qwen2)
    name = "model.layers.2.self_attn.q_proj.weight"
    assert torch.equal(records[name].read(), cached_qwen2[name])


def test_offline_hub_id_with_revision_commit(cached_qwen2):
    assert open_source("org/tiny-qwen2", revision=COMMIT).revision == COMMIT


def test_fingerprint_includes_blob_sha256(cached_qwen2, tiny_qwen2, tmp_path):
    _, folders = tiny_qwen2
    assert open_source("org/tiny-qwen2").fingerprint != open_source(folders["sharded"]).fingerprint


def test_offline_gguf_in_cache(hf_cache, tiny_gguf_dir, make_hf_cache):
    make_hf_cache(hf_cache, "org/tiny-gguf", {"f16.gguf": tiny_gguf_dir / "f16.gguf",
                                              "q8_0.gguf": tiny_gguf_dir / "q8_0.gguf"})
    source = open_source("org/tiny-gguf", gguf_file="q8_0.gguf")
    assert source.format == "gguf" and source.location == "org/tiny-gguf"
    with pytest.raises(SourceNotFoundError, match="several GGUF files .*gguf_file="):
        open_source("org/tiny-gguf")


def test_offline_and_not_cached_says_how_to_get_out(hf_cache):
    with pytest.raises(HubUnreachableError) as err:
        open_source("org/not-cached")
    msg = str(err.value)
    assert "'org/not-cached'" in msg and "HF_HUB_OFFLINE=1" in msg and str(hf_cache) in msg
    assert "local copy" in msg and "HF_HUB_CACHE" in msg
    assert err.value.cache_dir == str(hf_cache) and isinstance(err.value, FileNotFoundError)


def test_unreachable_hub_and_not_cached(hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # closed port: refused at once
    with pytest.raises(HubUnreachableError, match=r"cannot be reached .*no copy of it.*local copy") as err:
        open_source("org/not-cached")
    assert "set HF_HUB_OFFLINE=1" in str(err.value)
    assert "(RemoteRefusedError: no answer" in str(err.value) and "gave up" not in str(err.value)  # not retried


def test_unreachable_hub_falls_back_to_the_cache(cached_qwen2, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert open_source("org/tiny-qwen2").revision == COMMIT


def test_incomplete_cached_snapshot_is_named(hf_cache, tiny_qwen2, make_hf_cache):
    _, folders = tiny_qwen2
    make_hf_cache(hf_cache, "org/partial", {"config.json": folders["sharded"] / "config.json",
                                            "model.safetensors.index.json":
                                            folders["sharded"] / "model.safetensors.index.json"})
    with pytest.raises(HubUnreachableError, match=r"cached copy .* is incomplete: .*names shard\(s\) model-00001"):
        open_source("org/partial")


def test_wanted_files_take_one_copy_of_the_weights():
    files = ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
             "model-00002-of-00002.safetensors", "model.safetensors", "pytorch_model.bin", "onnx/model.onnx"]
    assert _wanted_files("o/r", files, None) == ["config.json", "model.safetensors.index.json"]
    assert _wanted_files("o/r", ["config.json", "pytorch_model.bin", "tf_model.h5"], None) == [
        "config.json", "pytorch_model.bin"]
    assert _wanted_files("o/r", ["README.md", "m.Q4_K_M.gguf"], None) == ["m.Q4_K_M.gguf"]
    with pytest.raises(SourceNotFoundError, match="no file 'x.gguf'; its GGUF files: a.gguf, b.gguf"):
        _wanted_files("o/r", ["a.gguf", "b.gguf"], "x.gguf")
    with pytest.raises(SourceNotFoundError, match=r"holds GGUF files \(a.gguf, b.gguf\): pass gguf_file="):
        _wanted_files("o/r", ["a.gguf", "b.gguf"], None)


@pytest.mark.parametrize("text, expected", [
    ("Qwen/Qwen2.5-7B", True), ("gpt2", True), ("./model", False), ("a/b/c", False),
    ("model.gguf", False), ("/abs/path", False), ("org/../x", False),
])
def test_hub_id_shape(text, expected):
    assert looks_like_hub_id(text) is expected


def test_online_download_asks_only_for_config_index_and_shards(tiny_qwen2, hf_cache, monkeypatch, make_hf_cache):
    """The online path with download=True (without it, a repo not cached is read in place:
    tests/sources/test_sources_remote.py), with the three hub calls (the listing, the two downloads) replaced by fakes
    that serve from a local folder and lay the cache out as the real client does."""
    import huggingface_hub

    from toolkit.sources.remote import folders as remote_folders

    _, folders = tiny_qwen2
    repo_files = sorted(p.name for p in folders["sharded"].iterdir()) + ["model.safetensors", "pytorch_model.bin"]
    asked = {}

    def fake_listing(endpoint, repo_id, revision):  # the hub's answer to model_info(files_metadata=True)
        return {"id": repo_id, "sha": COMMIT, "siblings": [{"rfilename": f} for f in repo_files]}

    def fake_file(repo_id, filename, *, revision, cache_dir, endpoint):
        asked.setdefault("single", []).append(filename)
        snap = make_hf_cache(hf_cache, repo_id, {filename: folders["sharded"] / filename}, revision)
        return str(snap / filename)

    def fake_snapshot(repo_id, *, revision, cache_dir, allow_patterns, endpoint):
        asked["patterns"] = list(allow_patterns)
        have = {p.name for p in (hf_cache / "models--org--online" / "snapshots" / revision).iterdir()}
        files = {f: folders["sharded"] / f for f in allow_patterns if f not in have}
        return str(make_hf_cache(hf_cache, repo_id, files, revision))

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(remote_folders, "hub_listing", fake_listing)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_file)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    source = open_source("org/online", download=True)
    shards = sorted(p.name for p in folders["sharded"].glob("model-0*.safetensors"))
    assert asked == {"single": ["model.safetensors.index.json"],
                     "patterns": ["config.json", "model.safetensors.index.json", *shards]}
    assert (source.location, source.revision, len(source.files())) == ("org/online", COMMIT, len(shards))


@pytest.mark.parametrize("reason", [
    "no answer (ConnectError: [Errno -3] Temporary failure in name resolution)",
    "no answer (ConnectError: " + "a very long transport text " * 12 + ")",
    "",
])
def test_unreachable_hub_never_prints_empty_parentheses(hf_cache, monkeypatch, reason):
    """A typo in a hub id, offline: the listing's long URL made a 120-character cut end at
    ``no answer (``, printed as ``no answer ()``."""
    import toolkit.sources.remote as remote
    from toolkit.errors import RemoteTransientError

    url = "https://huggingface.co/api/models/HuggingFaceTB/SmolLM2-135M-Instuct/revision/main?blobs=True"

    def unreachable(repo_id, revision=None):
        raise RemoteTransientError(url, 0, reason)

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(remote, "hub_folder", unreachable)
    with pytest.raises(HubUnreachableError) as err:
        open_source("HuggingFaceTB/SmolLM2-135M-Instuct")
    msg = str(err.value)
    assert "()" not in msg and "( " not in msg and ": )" not in msg, msg
    assert "cannot be reached (RemoteTransientError" in msg, msg
    assert msg.count("(") == msg.count(")"), msg
    if reason.startswith("no answer (ConnectError: [Errno"):
        assert reason in msg, msg
