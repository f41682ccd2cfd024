"""The command line, end to end on tiny checkpoints."""

from pathlib import Path

import numpy as np
import pytest

import toolkit
from toolkit.cli import main
from toolkit.testing import write_tiny_checkpoint


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


def test_weights_writes_netcdf_and_png(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "m", "qwen2", num_layers=4)
    out, png = tmp_path / "o.nc", tmp_path / "o.png"
    args = ["weights", str(path), "--metrics", "frobenius_norm", "stable_rank", "-o", str(out), "--plot", str(png),
            "-q"]
    assert main(args) == 0
    ds = toolkit.load(out)
    assert ds.sizes == {"layer": 4, "component": 7}
    assert set(ds.data_vars) == {"frobenius_norm", "stable_rank"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_and_series(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=0)
    b = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, seed=1)
    out = tmp_path / "c.nc"
    args = ["compare", str(a), str(a), "--metrics", "relative_change", "update_sparsity", "-o", str(out), "-q"]
    assert main(args) == 0
    ds = toolkit.load(out)
    np.testing.assert_array_equal(ds.relative_change.values[:, :6], 0.0)
    assert (ds.update_sparsity.values[:, :6] == 1.0).all()
    out2, png = tmp_path / "s.nc", tmp_path / "s.png"
    args = ["series", str(a), str(b), "--steps", "0", "10", "--metrics", "relative_change", "-o", str(out2),
            "--plot", str(png), "-q"]
    assert main(args) == 0
    s = toolkit.load(out2)
    assert list(s.step.values) == [0, 10]
    assert (s.relative_change.isel(checkpoint=1).values[:, :6] > 0).all()
    assert png.exists()


def test_toolkit_error_is_one_line_exit_2(tmp_path, capsys):
    assert main(["weights", str(tmp_path / "missing"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_unknown_metric_via_cli(tmp_path, capsys):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    assert main(["weights", str(path), "--metrics", "nope", "-q"]) == 2
    assert "unknown metric 'nope'" in capsys.readouterr().err


def _no_computing(monkeypatch):
    """Make any computing fail the test: the checks must come first."""
    for name in ("weight_stats", "compare", "compare_series"):
        monkeypatch.setattr(toolkit, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} ran before the check"))


def test_plot_defaults_to_a_computed_metric(tmp_path, capsys):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar
    png = tmp_path / "w.png"
    assert main(["weights", str(path), "--metrics", "frobenius_norm", "--plot", str(png), "-q"]) == 0
    assert f"wrote {png} (frobenius_norm)" in capsys.readouterr().out and png.exists()
    assert main(["weights", str(path), "--metrics", "rms", "stable_rank", "--plot", str(png), "-q"]) == 0
    assert "(stable_rank)" in capsys.readouterr().out  # the default, when it is computed
    assert main(["compare", str(path), str(path), "--metrics", "update_sparsity", "--plot", str(tmp_path / "c.png"),
                 "-q"]) == 0
    assert "(update_sparsity)" in capsys.readouterr().out
    assert main(["series", str(path), str(path), "--metrics", "update_sparsity", "cosine_similarity",
                 "--plot", str(tmp_path / "s.png"), "-q"]) == 0
    assert "(update_sparsity)" in capsys.readouterr().out


def test_plot_metric_not_computed_fails_before_computing(tmp_path, capsys, monkeypatch):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar
    _no_computing(monkeypatch)
    png = str(tmp_path / "p.png")
    assert main(["weights", str(path), "--metrics", "frobenius_norm", "--plot", png, "--plot-metric", "stable_rank",
                 "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --plot-metric 'stable_rank' is not computed: add it to --metrics")
    assert "--metrics frobenius_norm stable_rank" in err and "Traceback" not in err
    assert main(["compare", str(path), str(path), "--metrics", "update_sparsity", "--plot", png,
                 "--plot-metric", "relative_change", "-q"]) == 2
    assert "add it to --metrics" in capsys.readouterr().err
    assert main(["series", str(path), str(path), "--metrics", "update_sparsity", "--plot", png,
                 "--plot-metric", "relative_change", "-q"]) == 2
    assert "add it to --metrics" in capsys.readouterr().err
    assert main(["weights", str(path), "--plot", png, "--plot-metric", "stabel_rank", "-q"]) == 2
    assert "Did you mean 'stable_rank'?" in capsys.readouterr().err
    assert main(["weights", str(path), "--plot", png, "--plot-metric", "relative_change", "-q"]) == 2
    err = capsys.readouterr().err
    assert "'relative_change' is a diff metric" in err and "python -m toolkit compare" in err
    assert not (tmp_path / "p.png").exists()


def test_metric_of_the_other_kind_names_the_subcommand(tmp_path, capsys, monkeypatch):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar
    _no_computing(monkeypatch)
    assert main(["weights", str(path), "--metrics", "relative_change", "-q"]) == 2
    err = capsys.readouterr().err
    assert "is a diff metric, not a weight metric" in err
    assert "python -m toolkit compare BASE TARGET --metrics relative_change" in err
    assert main(["compare", str(path), str(path), "--metrics", "stable_rank", "-q"]) == 2
    assert "python -m toolkit weights MODEL --metrics stable_rank" in capsys.readouterr().err


def test_bad_output_paths_fail_before_computing(tmp_path, capsys, monkeypatch):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar
    _no_computing(monkeypatch)
    (tmp_path / "afile").write_text("x")
    cases = [
        (["-o", str(tmp_path) + "/"], "-o/--output is a folder; give a file name inside it"),
        (["-o", str(tmp_path)], "-o/--output is a folder"),
        (["-o", str(tmp_path / "afile" / "x.nc")], "is a file, not a folder; choose another path"),
        (["--plot", str(tmp_path)], "--plot is a folder; give a file name inside it, e.g."),
        (["--plot", str(tmp_path / "x.pnq")], ".pnq is not a format matplotlib writes"),
    ]
    if Path("/proc/self").is_dir():  # a folder no file can be created in, even as root
        cases.append((["-o", "/proc/x.nc"], "cannot create a file in '/proc'"))
    for extra, expected in cases:
        assert main(["weights", str(path), *extra, "-q"]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("error: cannot write ") and expected in err and "Traceback" not in err, err
    for cmd in (["compare", str(path), str(path)], ["series", str(path), str(path)]):
        assert main([*cmd, "-o", str(tmp_path) + "/", "-q"]) == 2
        assert "is a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["afile", "m"]  # no probe file left


def test_oserror_at_save_time_is_a_clean_error(tmp_path, capsys, monkeypatch):
    import errno

    import matplotlib.figure
    import xarray as xr

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full)
    out = tmp_path / "o.nc"
    assert main(["weights", str(path), "--metrics", "rms", "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write '{out}': No space left on device") and "Traceback" not in err
    assert not list(tmp_path.glob("o.nc*"))  # no temporary file left
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    assert main(["weights", str(path), "--metrics", "rms", "--plot", str(tmp_path / "p.png"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and "No space left on device" in err and "--plot" in err


def test_output_in_a_missing_folder_is_announced_before_computing(tmp_path, capsys, monkeypatch):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()  # the writer's progress bar
    out, png = tmp_path / "new" / "deeper" / "o.nc", tmp_path / "pics" / "o.png"
    args = ["weights", str(path), "--metrics", "rms", "-o", str(out), "--plot", str(png), "-q"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"note: -o/--output: the folder {str(tmp_path / 'new')!r} does not exist; it will be created" in err
    assert f"note: --plot: the folder {str(tmp_path / 'pics')!r} does not exist" in err
    assert toolkit.load(out).sizes == {"layer": 2, "component": 7} and png.exists()
    assert main(args) == 0  # the folders exist now: nothing to say
    assert "note:" not in capsys.readouterr().err

    def stop(*a, **k):
        raise toolkit.ToolkitError("stopped before computing")

    monkeypatch.setattr(toolkit, "weight_stats", stop)
    assert main(["weights", str(path), "-o", str(tmp_path / "other" / "o.nc"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.index("note: -o/--output: the folder") < err.index("error: stopped before computing")
    assert not (tmp_path / "other").exists()  # announced, not created: nothing was written


def test_compare_of_missing_folders_says_no_such_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    real = write_tiny_checkpoint(tmp_path / "real", "llama", num_layers=2)
    capsys.readouterr()
    for args, name in ((["base_dir", "target_dir"], "base_dir"), ([str(real), "target_dir"], "target_dir")):
        assert main(["compare", *args, "-q"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: no such folder or file {name!r} in {str(tmp_path)!r} (nor a hub model"), err
        assert "Check the path" in err and len(err) < 400 and err.count("\n") == 1
    assert main(["compare", "org/name", str(real), "-q"]) == 2  # a hub id keeps the hub's own explanation
    err = capsys.readouterr().err
    assert "HF_HUB_OFFLINE=1" in err and "no such folder" not in err


@pytest.mark.parametrize("command", [[], ["weights"], ["compare"], ["series"], ["finetune"], ["lab"]])
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m toolkit") and "``" not in text and ":func:" not in text


def test_the_terminal_hears_of_the_work_before_the_bar(tmp_path, capsys):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    capsys.readouterr()
    assert main(["weights", str(path), "--metrics", "rms"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"opening {path} \u2026\n") and "14/14" in err  # then the bar: 2 layers x 7 tensors
    assert main(["compare", str(path), str(path), "--metrics", "relative_change", "-q"]) == 0
    assert capsys.readouterr().err == ""  # -q: nothing


def test_selection_flags_select_what_the_api_selects(tmp_path, capsys):
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=4, seed=2)
    tuned = write_tiny_checkpoint(tmp_path / "t", "llama", num_layers=4, seed=3)
    out = tmp_path / "w.nc"
    assert main(["weights", str(path), "--metrics", "frobenius_norm", "--layers", "1:4:2", "--components",
                 "attn.*,mlp.up", "-o", str(out), "-q"]) == 0
    ds = toolkit.load(out)
    want = toolkit.weight_stats(path, ["frobenius_norm"], progress=False, cache=False)
    assert ds.layer.values.tolist() == [1, 3]
    assert ds.component.values.tolist() == ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.up"]
    np.testing.assert_array_equal(ds.frobenius_norm.values,
                                  want.frobenius_norm.sel(layer=[1, 3], component=ds.component.values).values)
    assert main(["weights", str(path), "--metrics", "rms", "--layers=-1", "--components", "mlp.down", "--fill",
                 "-o", str(out), "-q"]) == 0
    full = toolkit.load(out)
    assert full.sizes == {"layer": 4, "component": 7} and int(full.rms.notnull().sum()) == 1
    assert main(["compare", str(path), str(tuned), "--metrics", "relative_change", "--layers", "0,2",
                 "-o", str(out), "-q"]) == 0
    assert toolkit.load(out).layer.values.tolist() == [0, 2]
    capsys.readouterr()
    assert main(["weights", str(path), "--layers", "7", "-q"]) == 2
    assert "layers=7 selects nothing in this model: the model has 4 layers" in capsys.readouterr().err
    for flags, said in ((["--layers", "1:x"], "layers='1:x' is not valid: layers must be an index (3, -1), a list"),
                        (["--layers", "1_0"], "layers='1_0' is not valid"),  # not layer 10 (Python's int syntax)
                        (["--layers", "\uff11"], "written with the ASCII digits 0-9 only"),  # a full-width 1
                        (["--experts", "0,\u0663"], "experts='0,\u0663' is not valid"),  # an Arabic-Indic 3
                        (["--components", "attn.q,,mlp.up"], "holds an empty name")):
        with pytest.raises(SystemExit) as e:
            main(["weights", str(path), *flags, "-q"])
        assert e.value.code == 2 and said in capsys.readouterr().err


def test_exit_process_freezes_what_is_alive_and_exits_with_the_status():
    import gc

    from toolkit.cli import exit_process

    gc.unfreeze()
    try:
        with pytest.raises(SystemExit) as stop:
            exit_process(3)
        assert stop.value.code == 3
        assert gc.get_freeze_count() > 0  # the teardown's collections will not walk them
    finally:
        gc.unfreeze()


def test_every_process_entry_point_ends_through_exit_process():
    import importlib
    import tomllib

    import toolkit.cli

    root = Path(toolkit.__file__).parent
    # the script as pyproject.toml declares it (an installed copy's metadata may be older than the checkout)
    target = tomllib.loads((root.parent / "pyproject.toml").read_text())["project"]["scripts"]["toolkit"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is toolkit.cli.run
    for main_module in ("__main__.py", "cli/__main__.py", "finetune/__main__.py", "lab/__main__.py"):
        text = (root / main_module).read_text()
        assert "run()" in text or "exit_process(main())" in text, main_module


def test_the_process_writes_what_the_api_computes_and_exits_with_its_status(tmp_path):
    import os
    import subprocess
    import sys

    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=2)
    out = tmp_path / "o.nc"
    env = {**os.environ, "TOOLKIT_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "toolkit", "weights", str(path), "--metrics", "frobenius_norm", "stable_rank",
           "-o", str(out), "-q"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    expected = toolkit.weight_stats(str(path), metrics=["frobenius_norm", "stable_rank"], progress=False, cache=False)
    got = toolkit.load(out)
    for name in ("frobenius_norm", "stable_rank"):
        np.testing.assert_allclose(got[name].values, expected[name].values, rtol=1e-12, equal_nan=True)
    bad = subprocess.run(cmd[:4] + [str(tmp_path / "missing")] + cmd[5:], env=env, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
