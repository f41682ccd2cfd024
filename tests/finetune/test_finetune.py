"""The fine-tuning command on a tiny llama: bf16 checkpoints, step 0 exact, reuse, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from _compare_data import tiny
from toolkit import finetune as ft
from toolkit.collect.compare import compare, compare_series
from toolkit.errors import EmptyInputError, ToolkitError
from toolkit.finetune import run as ft_run

SETTINGS = dict(preset="short", steps=3, save_every=2, seq_len=32, batch_size=2, lr=1e-3, progress=False)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    base = tiny(root / "base", num_layers=2, dtype=torch.float32)
    return base, ft.finetune(root / "run", base=base, **SETTINGS)


def test_checkpoints_are_bf16_folders_at_the_saved_steps(run):
    base, r = run
    assert r.steps == [0, 2, 3] and [p.name for p in r.checkpoints] == ["step-00000", "step-00002", "step-00003"]
    assert len(r.losses) == 3 and all(np.isfinite(r.losses))
    for path in r.checkpoints:
        cfg = json.loads((path / "config.json").read_text())
        assert cfg["dtype"] == "bfloat16" and cfg["model_type"] == "llama"
        with safe_open(path / "model.safetensors", "pt") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    info = json.loads((r.out_dir / "run.json").read_text())
    assert info["complete"] and info["settings"]["lr"] == 1e-3 and info["settings"]["base"] == str(base)


def test_step0_is_the_base_rounded_to_bf16_and_training_moves_weights(run):
    base, r = run
    start = compare(base, r.base, ["update_sparsity", "relative_change"], progress=False)
    np.testing.assert_array_equal(start.update_sparsity, 1.0)  # float32 base judged in bf16
    assert float(start.relative_change.max()) < 2.0**-8
    series = compare_series(r.checkpoints, steps=r.steps, metrics=["update_density"], progress=False)
    density = series.update_density.mean(["layer", "component"]).values
    assert density[0] == 0.0 and 0.0 < density[1] <= 1.0 and 0.0 < density[2] <= 1.0
    assert series.step.values.tolist() == [0, 2, 3]


def test_a_second_call_returns_the_finished_run(run, monkeypatch):
    base, r = run
    monkeypatch.setattr(ft_run, "_train", lambda *a, **k: pytest.fail("trained again"))
    again = ft.finetune(r.out_dir, base=base, **SETTINGS)
    assert again.checkpoints == r.checkpoints and again.losses == r.losses
    with pytest.raises(ToolkitError, match="other settings.*overwrite=True"):
        ft.finetune(r.out_dir, base=base, **{**SETTINGS, "lr": 5e-4})


def test_foreign_folders_are_never_deleted(tmp_path, run):
    base, _ = run
    (tmp_path / "mine" / "step-00100").mkdir(parents=True)
    with pytest.raises(ToolkitError, match="finetune did not write"):
        ft.finetune(tmp_path / "mine", base=base, **SETTINGS)
    assert (tmp_path / "mine" / "step-00100").is_dir()


def test_overwrite_replaces_a_run(tmp_path, run):
    base, _ = run
    quick = {**SETTINGS, "steps": 1, "save_every": 1}
    first = ft.finetune(tmp_path / "r", base=base, **quick)
    second = ft.finetune(tmp_path / "r", base=base, overwrite=True, **{**quick, "steps": 2})
    assert first.steps == [0, 1] and second.steps == [0, 1, 2] and second.settings["steps"] == 2


def test_load_run_refuses_an_unfinished_folder(tmp_path):
    with pytest.raises(ToolkitError, match="no finished fine-tuning run"):
        ft.load_run(tmp_path)


def test_presets_and_short_text(tmp_path, run):
    base, _ = run
    assert ft.PRESETS["full"]["steps"] == 40 and ft.PRESETS["full"]["save_every"] == 5
    with pytest.raises(ToolkitError, match="preset must be one of 'short', 'full'"):
        ft.finetune(tmp_path / "x", base=base, preset="huge")
    short = tmp_path / "short.txt"
    short.write_text("2 + 2 = 4")
    with pytest.raises(EmptyInputError, match="seq_len=32 needs more"):
        ft.finetune(tmp_path / "y", base=base, text=short, **SETTINGS)


def test_command_line(tmp_path, run, capsys):
    base, _ = run
    code = ft.main([str(tmp_path / "cli"), "--base", str(base), "--preset", "short", "--steps", "1",
                    "--save-every", "1", "--seq-len", "16", "--batch-size", "1", "-q"])
    assert code == 0
    out = capsys.readouterr().out
    assert "2 checkpoints" in out and "steps [0, 1]" in out
    assert ft.main([str(tmp_path / "cli2"), "--base", str(tmp_path / "missing"), "-q"]) == 2
    assert "cannot open checkpoint" in capsys.readouterr().err
