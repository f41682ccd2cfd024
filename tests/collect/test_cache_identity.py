"""No cached number is ever served for other bytes: file identity, plan cache and cache keys.

Every test checks the numbers against an independent computation (numpy on the
tensors safetensors reads), never only that the cache missed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
import xarray as xr
from safetensors.torch import load_file

import toolkit
from toolkit.sources.identity import file_identity
from toolkit.testing import write_tiny_checkpoint

Q = "model.layers.0.self_attn.q_proj.weight"


pytestmark = pytest.mark.usefixtures("cache")


def frobenius(folder, name=Q) -> float:
    """||W||_F straight from the file (numpy, float64)."""
    w = load_file(str(folder / "model.safetensors"))[name].double().numpy()
    return float(np.sqrt((w * w).sum()))


def relative_change(base, target, name=Q) -> float:
    b = load_file(str(base / "model.safetensors"))[name].double().numpy()
    t = load_file(str(target / "model.safetensors"))[name].double().numpy()
    return float(np.linalg.norm(t - b) / np.linalg.norm(b))


def q_norm(ds) -> float:
    return float(ds.frobenius_norm.sel(layer=0, component="attn.q"))


def same_times(*folders) -> None:
    """Give every file of every folder the same atime/mtime (as unzipping an archive does)."""
    for folder in folders:
        for p in [folder, *folder.iterdir()]:
            os.utime(p, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))


def test_two_folders_with_equal_names_sizes_and_mtimes_never_share_results(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "x" / "model", "llama", num_layers=2, seed=1)
    b = write_tiny_checkpoint(tmp_path / "y" / "model", "llama", num_layers=2, seed=2)
    same_times(a, b)
    assert os.path.getsize(a / "model.safetensors") == os.path.getsize(b / "model.safetensors")
    ds_a = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    ds_b = toolkit.weight_stats(b, ["frobenius_norm"], progress=False)
    assert q_norm(ds_a) == pytest.approx(frobenius(a), rel=1e-6)
    assert q_norm(ds_b) == pytest.approx(frobenius(b), rel=1e-6)
    assert frobenius(a) != pytest.approx(frobenius(b), rel=1e-3)
    diff = toolkit.compare(a, b, ["relative_change"], progress=False)
    expected = relative_change(a, b)
    assert expected > 0.5
    assert float(diff.relative_change.sel(layer=0, component="attn.q")) == pytest.approx(expected, rel=1e-9)
    assert ds_a.attrs["fingerprint"] != ds_b.attrs["fingerprint"]


def test_a_file_overwritten_in_place_by_cp_p_of_another(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=1)
    b = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, seed=2)
    same_times(a, b)
    before = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    assert q_norm(before) == pytest.approx(frobenius(a), rel=1e-6)
    inode = os.stat(a / "model.safetensors").st_ino
    subprocess.run(["cp", "-p", str(b / "model.safetensors"), str(a / "model.safetensors")], check=True)
    st = os.stat(a / "model.safetensors")
    assert st.st_ino == inode and st.st_mtime_ns == os.stat(b / "model.safetensors").st_mtime_ns
    after = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    assert q_norm(after) == pytest.approx(frobenius(b), rel=1e-6)
    assert q_norm(after) != pytest.approx(q_norm(before), rel=1e-3)


def test_bytes_changed_then_mtime_restored_with_touch_r(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=1)
    f = a / "model.safetensors"
    ref = tmp_path / "ref"
    ref.touch()
    os.utime(f, ns=(1_600_000_000_000_000_000,) * 2)
    os.utime(ref, ns=(1_600_000_000_000_000_000,) * 2)
    before = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    tensors = load_file(str(f))
    tensors[Q] = tensors[Q] * 2  # same size, other bytes
    data = f.read_bytes()
    from safetensors.torch import save

    new = save(tensors, metadata={"format": "pt"})
    assert len(new) == len(data)
    with open(f, "r+b") as fh:  # in place: same inode
        fh.write(new)
    subprocess.run(["touch", "-r", str(ref), str(f)], check=True)
    assert os.stat(f).st_mtime_ns == 1_600_000_000_000_000_000
    after = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    assert q_norm(after) == pytest.approx(2 * q_norm(before), rel=1e-6)
    assert q_norm(after) == pytest.approx(frobenius(a), rel=1e-6)


def test_a_moved_folder_hits_its_cached_results(tmp_path, reads):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=1)
    first = toolkit.weight_stats(a, ["frobenius_norm"], progress=False)
    assert len(reads) == 2 * 7
    moved = tmp_path / "moved"
    os.rename(a, moved)
    again = toolkit.weight_stats(moved, ["frobenius_norm"], progress=False)
    assert len(reads) == 2 * 7  # same device, inodes, sizes and times: nothing read again
    np.testing.assert_array_equal(first.frobenius_norm.values, again.frobenius_norm.values)
    assert again.attrs["source"] == str(moved)
    copied = tmp_path / "copied"
    shutil.copytree(moved, copied)  # new inodes: computed again, same numbers
    third = toolkit.weight_stats(copied, ["frobenius_norm"], progress=False)
    assert len(reads) == 2 * 2 * 7
    np.testing.assert_allclose(first.frobenius_norm.values, third.frobenius_norm.values, rtol=1e-12)


def test_a_hub_cache_blob_rewritten_through_its_snapshot_link(tmp_path, monkeypatch, make_hf_cache, reads):
    ckpt = write_tiny_checkpoint(tmp_path / "tiny", "llama", num_layers=2, seed=3)
    other = write_tiny_checkpoint(tmp_path / "other", "llama", num_layers=2, seed=4)
    hub = tmp_path / "hub"
    snapshot = make_hf_cache(hub, "org/tiny", {p.name: p for p in ckpt.iterdir()})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    weights = snapshot / "model.safetensors"
    assert file_identity(weights).startswith("blob:" + os.path.basename(os.path.realpath(weights)) + ":stat:")
    first = toolkit.weight_stats("org/tiny", ["frobenius_norm"], progress=False)
    again = toolkit.weight_stats("org/tiny", ["frobenius_norm"], progress=False)
    assert len(reads) == 2 * 7 and q_norm(again) == q_norm(first) == pytest.approx(frobenius(ckpt), rel=1e-6)
    shutil.copyfile(other / "model.safetensors", weights)  # writes through the link: the blob's name now lies
    rewritten = toolkit.weight_stats("org/tiny", ["frobenius_norm"], progress=False)
    assert q_norm(rewritten) == pytest.approx(frobenius(other), rel=1e-6)


def test_changed_split_sizes_in_the_config_are_new_cells(tmp_path):
    """phi3's fused qkv_proj is cut by the config's head counts: counts that would cut it otherwise contradict
    o_proj's stored shape (heads x head_dim inputs), so that config is refused, never served from the cache."""
    from toolkit.errors import MappingError

    path = write_tiny_checkpoint(tmp_path / "p", "phi3", num_layers=2, seed=4)
    cfg = json.loads((path / "config.json").read_text())
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    assert heads % 2 == 0 and kv * 2 <= heads
    first = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    # same fused rows (q + 2 kv = heads + 2 kv) with fewer q heads and more kv heads: a different cut
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    cfg.update(num_attention_heads=heads - 2, num_key_value_heads=kv + 1, head_dim=head_dim)
    (path / "config.json").write_text(json.dumps(cfg))
    for cache in (True, False):
        with pytest.raises(MappingError, match=r"attn.o of layer \d the shape \(out, in\) = \(32, 16\)"):
            toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=cache)
    w = load_file(str(path / "model.safetensors"))["model.layers.0.self_attn.qkv_proj.weight"].double()
    assert float(first.frobenius_norm.sel(layer=0, component="attn.q")) == pytest.approx(
        float(torch.linalg.matrix_norm(w[:heads * head_dim])), rel=1e-6)


def test_a_cached_plan_opens_nothing_and_a_stale_one_is_replanned(tmp_path, monkeypatch):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, seed=5)
    first = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    import toolkit.sources as sources

    def refuse(*args, **kwargs):
        raise AssertionError("the checkpoint was opened")

    monkeypatch.setattr(sources, "open_source", refuse)
    monkeypatch.setattr("toolkit.collect.plan.planner.open_source", refuse)
    again = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    np.testing.assert_array_equal(first.frobenius_norm.values, again.frobenius_norm.values)
    assert again.attrs["fingerprint"] == first.attrs["fingerprint"]
    monkeypatch.undo()
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    (path / "extra.json").write_text("{}")  # the folder changed: the plan is made again
    calls = []
    real = sources.open_source
    monkeypatch.setattr("toolkit.collect.plan.planner.open_source", lambda *a, **k: calls.append(a) or real(*a, **k))
    toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    assert len(calls) == 1


def test_a_file_rewritten_while_it_is_read_is_refused_and_nothing_of_it_is_cached(tmp_path, cache, monkeypatch):
    """The identity is checked again after each read, before a result is stored: a rewrite in place between
    the plan and a read (here: during the read of layer 1's q) is a CheckpointChangedError, and what is
    cached afterwards is only what the old bytes gave."""
    from toolkit.errors import CheckpointChangedError
    from toolkit.sources.base import TensorRecord

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, seed=1)
    other = write_tiny_checkpoint(tmp_path / "o", "llama", num_layers=2, seed=2)
    old = toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=False)
    original = TensorRecord.read

    def rewriting(self):
        out = original(self)
        if self.name == "model.layers.1.self_attn.q_proj.weight":
            data = (other / "model.safetensors").read_bytes()
            with open(path / "model.safetensors", "r+b") as f:  # in place: same inode
                f.write(data)
        return out

    monkeypatch.setattr(TensorRecord, "read", rewriting)
    with pytest.raises(CheckpointChangedError):
        toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    monkeypatch.setattr(TensorRecord, "read", original)
    new = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    fresh = toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=False)
    xr.testing.assert_equal(new.frobenius_norm, fresh.frobenius_norm)
    assert not np.allclose(new.frobenius_norm.values, old.frobenius_norm.values)


@pytest.mark.parametrize("method, key, value", [
    ("gptq", "checkpoint_format", "gptq_v2"),  # zeros read as stored instead of stored + 1
])
def test_a_config_edit_alone_is_a_cache_miss(tmp_path, cache, method, key, value):
    """Everything in config.json that turns bytes into matrices is part of what identifies a cached value:
    the same weight bytes under an edited quantization_config give the numbers the new config gives."""
    from _quant_writers import tiny_original, write_int

    original, _, _ = tiny_original(tmp_path / "orig")
    path, _ = write_int(tmp_path / "q", original, method)
    first = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"][key] = value
    (path / "config.json").write_text(json.dumps(cfg))
    again = toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    fresh = toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=False)
    xr.testing.assert_equal(again.frobenius_norm, fresh.frobenius_norm)
    assert not np.allclose(again.frobenius_norm.values, first.frobenius_norm.values, equal_nan=True)
    assert again.attrs["fingerprint"] == first.attrs["fingerprint"]  # the weight bytes did not change


def test_a_config_edit_the_stored_parts_contradict_is_refused_cached_or_not(tmp_path, cache):
    """AWQ group_size 16 -> 32 over scales of 16-row groups (it read half the scales: a number of neither):
    the parts no longer fit the config, refused with the cache as without it."""
    from _quant_writers import tiny_original, write_int
    from toolkit.errors import QuantizedLayoutError

    original, _, _ = tiny_original(tmp_path / "orig")
    path, _ = write_int(tmp_path / "q", original, "awq")
    toolkit.weight_stats(path, ["frobenius_norm"], progress=False)
    cfg = json.loads((path / "config.json").read_text())
    cfg["quantization_config"]["group_size"] = 32
    (path / "config.json").write_text(json.dumps(cfg))
    for use_cache in (True, False):
        with pytest.raises(QuantizedLayoutError, match=r"scales has \d+ rows, but \d+ input rows in groups of 32"):
            toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=use_cache)
