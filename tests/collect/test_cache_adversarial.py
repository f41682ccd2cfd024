"""Attacks on the cache that once gave wrong numbers or raw exceptions (found by an adversarial review).

Each test compares the cached result with a cache-free computation (or asserts the typed error).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.errors import CheckpointChangedError, CheckpointMismatchError
from toolkit.testing import write_tiny_checkpoint

pytestmark = pytest.mark.usefixtures("cache")
W = {"progress": False}


@pytest.fixture
def ckpt(tmp_path):
    return write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2, seed=31)


@pytest.fixture
def metric_name():
    names = []
    yield names
    for n in names:
        toolkit.metrics.unregister_metric(n)


def cached_and_fresh(path, metric):
    got = toolkit.weight_stats(path, [metric], **W)
    ref = toolkit.weight_stats(path, [metric], cache=False, **W)
    return float(got[metric].values[0, 0]), float(ref[metric].values[0, 0])


def test_a_reregistered_metric_with_other_closure_defaults_or_code_misses(ckpt, metric_name):
    metric_name.append("adv_stat")

    def scaled(k):
        return lambda w, s: k * float(w.abs().sum())

    def with_default(w, s, p=1):
        return float(torch.linalg.vector_norm(w.double().flatten(), p))

    for func in (lambda w, s: float(w.max()), lambda w, s: float(w.min()), scaled(1.0), scaled(1000.0)):
        toolkit.register_metric("adv_stat", func, long_name="x", overwrite=True)
        got, ref = cached_and_fresh(ckpt, "adv_stat")
        assert got == ref
    toolkit.register_metric("adv_stat", with_default, long_name="x", overwrite=True)
    cached_and_fresh(ckpt, "adv_stat")
    with_default.__defaults__ = (2,)
    toolkit.register_metric("adv_stat", with_default, long_name="x", overwrite=True)
    got, ref = cached_and_fresh(ckpt, "adv_stat")
    assert got == ref
    toolkit.register_metric("adv_stat", lambda w, s: -1.0, long_name="x", overwrite=True)
    cached_and_fresh(ckpt, "adv_stat")
    toolkit.register_metric("adv_stat", lambda w, s: -1.0 if s is None else float(s[0]), long_name="x",
                            needs_singular_values=True, overwrite=True)
    got, ref = cached_and_fresh(ckpt, "adv_stat")
    assert got == ref > 0


def test_array_options_are_keyed_by_their_bytes(ckpt, metric_name):
    metric_name.append("adv_wsum")

    def weighted(w, s, weights=None):
        return float((w.abs().flatten()[: len(weights)].double() * torch.as_tensor(weights)).sum())

    weights = np.ones(1024)
    toolkit.register_metric("adv_wsum", weighted, long_name="x", options={"weights": weights}, overwrite=True)
    cached_and_fresh(ckpt, "adv_wsum")
    changed = weights.copy()
    changed[500:520] = 100.0  # str() of both arrays is the same elided text
    toolkit.register_metric("adv_wsum", weighted, long_name="x", options={"weights": changed}, overwrite=True)
    got, ref = cached_and_fresh(ckpt, "adv_wsum")
    assert got == ref


def test_a_user_diff_metric_reading_the_sums_is_keyed_by_the_tolerance(tmp_path, metric_name):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=1)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    g = torch.Generator().manual_seed(0)
    tensors = {k: torch.where(torch.rand(v.shape, generator=g) < 0.5, v + 1e-3 * torch.randn(v.shape, generator=g), v)
               for k, v in load_file(str(a / "model.safetensors")).items()}
    save_file(tensors, str(b / "model.safetensors"), metadata={"format": "pt"})
    metric_name.append("adv_kept")
    toolkit.register_metric("adv_kept", lambda base, target, ctx: ctx.sums.unchanged / ctx.sums.n, long_name="kept",
                            kind="diff", needs_matrices=False, overwrite=True)
    toolkit.compare(a, b, ["adv_kept"], tolerance=0.0, **W)
    got = toolkit.compare(a, b, ["adv_kept"], tolerance=0.01, **W)
    ref = toolkit.compare(a, b, ["adv_kept"], tolerance=0.01, cache=False, **W)
    np.testing.assert_array_equal(got.adv_kept.values, ref.adv_kept.values)
    assert float(ref.adv_kept[0, 0]) == 1.0


def test_a_file_replaced_while_the_plan_is_made_is_never_paired_with_it(ckpt, tmp_path, monkeypatch, cache):
    other = write_tiny_checkpoint(tmp_path / "other", "llama", num_layers=2, seed=32)
    toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    shutil.rmtree(cache / "plans")
    import toolkit.collect.plan.planner as plan_mod

    real = plan_mod.plan_source

    def replaced_meanwhile(src, mapping=None):
        out = real(src, mapping)
        os.replace(other / "model.safetensors", ckpt / "model.safetensors")
        return out

    monkeypatch.setattr(plan_mod, "plan_source", replaced_meanwhile)
    toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    monkeypatch.setattr(plan_mod, "plan_source", real)
    got = toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    ref = toolkit.weight_stats(ckpt, ["frobenius_norm"], cache=False, **W)
    np.testing.assert_array_equal(got.frobenius_norm.values, ref.frobenius_norm.values)
    assert got.attrs["fingerprint"] == ref.attrs["fingerprint"]


def test_an_opened_source_kept_across_a_resave_is_refused(ckpt, tmp_path):
    other = write_tiny_checkpoint(tmp_path / "other", "llama", num_layers=2, seed=33)
    src = toolkit.open_source(ckpt)
    toolkit.weight_stats(src, ["frobenius_norm"], **W)
    shutil.copyfile(other / "model.safetensors", ckpt / "model.safetensors")
    with pytest.raises(CheckpointChangedError, match="changed after the run was planned"):
        toolkit.weight_stats(src, ["frobenius_norm"], **W)
    fresh = toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)  # opened again: the new bytes
    np.testing.assert_array_equal(
        fresh.frobenius_norm.values, toolkit.weight_stats(other, ["frobenius_norm"], cache=False, **W)
        .frobenius_norm.values)


def test_checkpoints_whose_fused_splits_differ_are_a_mismatch(tmp_path):
    c0 = write_tiny_checkpoint(tmp_path / "c0", "gpt_neox", num_layers=2, seed=1)
    c1 = write_tiny_checkpoint(tmp_path / "c1", "gpt_neox", num_layers=2, seed=2)
    cfg = json.loads((c1 / "config.json").read_text())
    cfg["num_attention_heads"] = 8
    (c1 / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointMismatchError, match="split differently"):
        toolkit.compare(c0, c1, ["subspace_overlap"], **W)
    with pytest.raises(CheckpointMismatchError, match="split differently"):
        toolkit.compare_series([c0, c1], reference="previous", metrics=["subspace_overlap"], **W)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"cell": "%s", "shape": [4, 4], "results": '
                                  '{"k": [1e400, ""]}}', '{"cell": "%s", "shape": [1e30, 3], "results": {}}'])
def test_entries_that_overflow_or_nest_deeply_are_misses(ckpt, cache, text):
    first = toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    for f in (cache / "weights").rglob("*.json"):
        cell = json.loads(f.read_text())["cell"]
        f.write_text(text.replace("%s", cell) if "%s" in text else text)
    again = toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    np.testing.assert_array_equal(first.frobenius_norm.values, again.frobenius_norm.values)


@pytest.mark.parametrize("edit", [
    lambda d: d["pieces"][next(iter(d["pieces"]))][0]["extract"].__setitem__("transpose", "false"),
    lambda d: d["pieces"][next(iter(d["pieces"]))][0].__setitem__("layer", True),
    lambda d: d["pieces"][next(iter(d["pieces"]))][0].__setitem__("layer", 7),
    lambda d: d["pieces"][next(iter(d["pieces"]))][0].__setitem__("component", "attn.zz"),
    lambda d: d.__setitem__("num_layers", 2.7),
    lambda d: d.__setitem__("num_layers", -3),
    lambda d: d.__setitem__("num_layers", 1e400),
    lambda d: d.__setitem__("inputs", {}),
    lambda d: d["source"].__setitem__("fingerprint", "0" * 64),
])
def test_crafted_plan_entries_are_made_again(ckpt, cache, edit):
    truth = toolkit.weight_stats(ckpt, ["frobenius_norm"], cache=False, **W)
    toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    (plan,) = (cache / "plans").glob("*.json")
    data = json.loads(plan.read_text())
    edit(data)
    plan.write_text(json.dumps(data))
    got = toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    np.testing.assert_array_equal(got.frobenius_norm.values, truth.frobenius_norm.values)
    np.testing.assert_array_equal(got.n_rows.values, truth.n_rows.values)


def test_clear_cache_deletes_only_what_the_toolkit_stored(ckpt, cache):
    toolkit.weight_stats(ckpt, ["frobenius_norm"], **W)
    notes = cache / "notes" / "thesis.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("years of work")
    assert toolkit.clear_cache() > 0
    assert notes.read_text() == "years of work"
    assert not (cache / "weights").exists() and not (cache / "plans").exists()
