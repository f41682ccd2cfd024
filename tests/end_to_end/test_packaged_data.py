"""The data files live in the top-level data/ and install with the package: data_path finds
them in the checkout (and so in an editable install) and in an installed wheel."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import toolkit
from toolkit.data import FILES, LOCATIONS, data_path

PACKAGE = Path(toolkit.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
#: Where pyproject.toml installs the files of data/: the package toolkit.data.files.
WHEEL_FOLDER = "toolkit/data/files"


def _defaults() -> dict[str, Path]:
    from toolkit.activations.inputs import DEFAULT_PROMPTS
    from toolkit.analysis.held_out import HELD_OUT_TEXT
    from toolkit.finetune.run import DEFAULT_TEXT
    from toolkit.lab import RESULT_PATH, RESULTS

    return {"prompts.txt": DEFAULT_PROMPTS, "finetune.txt": DEFAULT_TEXT, "heldout.txt": HELD_OUT_TEXT,
            "attention_lab.nc": RESULT_PATH,
            "attention_lab_n65.nc": RESULTS["up16"]}


def test_data_path_finds_the_files_in_the_checkout():
    """The editable install runs toolkit/ of this checkout; the files are in its top-level data/."""
    assert PACKAGE == ROOT / "toolkit", "tests run against the checkout (make setup's editable install)"
    assert LOCATIONS == (PACKAGE / "data" / "files", ROOT / "data")
    assert sorted(p.name for p in (ROOT / "data").iterdir() if p.is_file()) == sorted(FILES)
    defaults = _defaults()
    assert sorted(defaults) == sorted(FILES)
    for name, path in defaults.items():
        assert path == data_path(name) == ROOT / "data" / name
        assert path.is_file() and path.stat().st_size > 0, path


def test_data_path_prefers_the_installed_folder(tmp_path, monkeypatch):
    installed, checkout = tmp_path / "installed", tmp_path / "checkout"
    installed.mkdir()
    checkout.mkdir()
    (installed / "prompts.txt").write_text("a")
    (checkout / "prompts.txt").write_text("b")
    (checkout / "finetune.txt").write_text("c")
    monkeypatch.setattr("toolkit.data.LOCATIONS", (installed, checkout))
    assert data_path("prompts.txt") == installed / "prompts.txt"
    assert data_path("finetune.txt") == checkout / "finetune.txt"
    assert data_path("attention_lab.nc") == installed / "attention_lab.nc"  # neither: where a wheel has it


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
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert config["package-dir"] == {"toolkit.data.files": "data"}
    patterns = config["package-data"]["toolkit.data.files"]
    for name in FILES:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages (discovery cannot map data/): a package folder
    missing from the list would be missing from the wheel."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    found = sorted(".".join(init.parent.relative_to(ROOT).parts) for init in PACKAGE.rglob("__init__.py"))
    missing = sorted(set(found) - set(listed))
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert sorted(listed) == sorted([*found, "toolkit.data.files"])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of this checkout, built as pip builds it (no network: no build isolation)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("toolkit", "data"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(out), str(src)], check=True, capture_output=True, text=True, timeout=300)
    (built,) = out.glob("toolkit-*.whl")
    return built


def test_wheel_holds_the_data_files_where_data_path_looks(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert "toolkit/data/__init__.py" in names
        for name in FILES:
            assert z.read(f"{WHEEL_FOLDER}/{name}") == (ROOT / "data" / name).read_bytes(), name
    assert not any(n.startswith("data/") for n in names)  # no top-level data/ in site-packages


def test_wheel_holds_the_widgets_browser_code(wheel):
    """The explorer's front ends ship with the package (anywidget loads them from the kernel, offline)."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for path in sorted((PACKAGE / "widgets" / "js").iterdir()):
        assert f"toolkit/widgets/js/{path.name}" in names, path.name


def test_installed_wheel_finds_its_data(wheel, tmp_path):
    """Install the wheel into a fresh folder and import the toolkit from there (the
    dependencies from this venv), away from the checkout: the defaults open from the install."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    code = """if True:
        import sys
        from pathlib import Path
        import toolkit
        from toolkit.activations.inputs import DEFAULT_PROMPTS, load_prompts
        from toolkit.analysis.held_out import HELD_OUT_TEXT
        from toolkit.data import FILES, data_path
        from toolkit.finetune.run import DEFAULT_TEXT
        from toolkit.lab import RESULT_PATH, RESULTS, load_result

        site = Path(sys.argv[1]).resolve()
        assert Path(toolkit.__file__).resolve().is_relative_to(site), toolkit.__file__
        for name in FILES:
            path = data_path(name)
            assert path.resolve() == site / "toolkit" / "data" / "files" / name and path.is_file(), path
        assert {DEFAULT_PROMPTS, DEFAULT_TEXT, HELD_OUT_TEXT, RESULT_PATH, RESULTS["up16"]} == {
            data_path(n) for n in FILES}
        assert len(load_prompts()) >= 30
        assert load_result().sizes["activation"] == 5 == load_result("up16").sizes["activation"]
        print("ok")
    """
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


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
