"""The default data files ship inside the package, so a wheel install finds them."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

import toolkit
from toolkit.data import FILES, data_path

PACKAGE = Path(toolkit.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[1]


def _defaults() -> dict[str, Path]:
    from toolkit.activations.inputs import DEFAULT_PROMPTS
    from toolkit.finetune.run import DEFAULT_TEXT
    from toolkit.lab import RESULT_PATH

    return {"prompts.txt": DEFAULT_PROMPTS, "finetune.txt": DEFAULT_TEXT, "attention_lab.nc": RESULT_PATH}


def test_default_paths_are_files_inside_the_installed_package():
    defaults = _defaults()
    assert sorted(defaults) == sorted(FILES)
    for name, path in defaults.items():
        assert path == data_path(name)
        assert path.resolve().is_relative_to(PACKAGE / "data"), path
        assert path.is_file() and path.stat().st_size > 0, path


def test_default_prompts_load():
    from toolkit.activations.inputs import as_texts, load_prompts

    texts = load_prompts()
    assert len(texts) >= 30 and all(t.strip() == t and t for t in texts)
    assert as_texts(None) == texts  # what activation_stats(texts=None) uses


def test_committed_lab_result_opens_from_the_package():
    from toolkit.lab import load_result

    assert load_result().sizes["activation"] == 5


def test_unknown_data_file():
    with pytest.raises(ValueError, match="prompts.txt"):
        data_path("nope.txt")


def test_pyproject_declares_every_file_as_package_data():
    """Without the declaration setuptools leaves the files out of the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["toolkit.data"]
    for name in FILES:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name


def test_lab_cli_writes_to_the_current_directory_not_the_package(monkeypatch, capsys):
    import toolkit.lab.train as train
    from toolkit.errors import ToolkitError
    from toolkit.lab.cli import DEFAULT_OUT, main

    seen = []

    def fake_run_experiment(activations, epochs, out, *args, **kwargs):
        seen.append(out)
        raise ToolkitError("stop before training")

    monkeypatch.setattr(train, "run_experiment", fake_run_experiment)
    assert main([]) == 2 and main(["--preset", "fast"]) == 2
    capsys.readouterr()
    assert seen == [DEFAULT_OUT["full"], DEFAULT_OUT["fast"]] == ["attention_lab.nc", "lab_fast.nc"]
    assert all(Path(out).parent == Path(".") for out in seen)  # relative to the working directory
