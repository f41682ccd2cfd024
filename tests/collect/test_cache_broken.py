"""A broken cache never stops work and never gives a wrong number: one warning, then the run goes on."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import toolkit
from toolkit.errors import CacheWarning
from toolkit.testing import write_tiny_checkpoint

METRICS = ["frobenius_norm", "stable_rank"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("broken") / "m", "llama", num_layers=2, seed=7)


@pytest.fixture(scope="module")
def truth(ckpt):
    return toolkit.weight_stats(ckpt, METRICS, progress=False, cache=False)


def same_numbers(ds, truth) -> None:
    for name in METRICS:
        np.testing.assert_array_equal(ds[name].values, truth[name].values)


def run_warning_once(ckpt, what: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = toolkit.weight_stats(ckpt, METRICS, progress=False)
        diff = toolkit.compare(ckpt, ckpt, ["relative_change"], progress=False)
    ours = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(ours) == 2, [str(w.message) for w in ours]  # one per run
    for w in ours:
        assert what in str(w.message) and "TOOLKIT_CACHE_DIR" in str(w.message)
    assert float(diff.relative_change.max()) == 0.0
    return ds


@pytest.mark.parametrize("where", ["a file", "under /proc"])
def test_an_unusable_cache_folder_only_warns(ckpt, truth, tmp_path, monkeypatch, where):
    if where == "a file":
        path = tmp_path / "cache"
        path.write_text("not a folder")
    else:
        path = "/proc/toolkit-cache"
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(path))
    same_numbers(run_warning_once(ckpt, str(path)), truth)


def _entries(root):
    return sorted(p for p in (root / "weights").rglob("*.json"))


@pytest.mark.parametrize("damage", ["truncated", "garbled", "wrong types", "wrong shape", "a folder", "empty",
                                    "wrong value type"])
def test_damaged_entries_are_recomputed(ckpt, truth, tmp_path, monkeypatch, damage):
    root = tmp_path / "cache"
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(root))
    toolkit.weight_stats(ckpt, METRICS, progress=False)
    files = _entries(root)
    assert len(files) == 2 * 7
    for f in files:
        data = json.loads(f.read_text())
        if damage == "truncated":
            f.write_text(f.read_text()[: len(f.read_text()) // 2])
        elif damage == "garbled":
            f.write_bytes(b"\xff\xfe\x00garbage")
        elif damage == "wrong types":
            data["results"] = ["not", "a", "dict"]
            f.write_text(json.dumps(data))
        elif damage == "wrong shape":
            data["shape"] = ["a", -1, 3]
            f.write_text(json.dumps(data))
        elif damage == "wrong value type":
            data["results"] = {k: ["12.5", v[1]] for k, v in data["results"].items()}
            f.write_text(json.dumps(data))
        elif damage == "a folder":
            f.unlink()
            f.mkdir()
        else:
            f.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning) if damage != "a folder" else None
        again = toolkit.weight_stats(ckpt, METRICS, progress=False)
    same_numbers(again, truth)


def test_damaged_plans_are_made_again(ckpt, truth, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(root))
    toolkit.weight_stats(ckpt, METRICS, progress=False)
    plans = sorted((root / "plans").glob("*.json"))
    assert len(plans) == 1
    for text in ["", "[]", '{"request": 1}', json.dumps({**json.loads(plans[0].read_text()), "pieces": {"x": 3}})]:
        plans[0].write_text(text)
        same_numbers(toolkit.weight_stats(ckpt, METRICS, progress=False), truth)
