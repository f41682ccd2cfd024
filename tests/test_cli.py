"""The command line, end to end on tiny checkpoints."""

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
    assert main(["weights", str(path), "--metrics", "frobenius_norm", "stable_rank", "-o", str(out), "--plot", str(png), "-q"]) == 0
    ds = toolkit.load(out)
    assert ds.sizes == {"layer": 4, "component": 7}
    assert set(ds.data_vars) == {"frobenius_norm", "stable_rank"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_and_series(tmp_path):
    a = write_tiny_checkpoint(tmp_path / "a", "llama", num_layers=2, seed=0)
    b = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, seed=1)
    out = tmp_path / "c.nc"
    assert main(["compare", str(a), str(a), "--metrics", "relative_change", "update_sparsity", "-o", str(out), "-q"]) == 0
    ds = toolkit.load(out)
    np.testing.assert_array_equal(ds.relative_change.values[:, :6], 0.0)
    assert (ds.update_sparsity.values[:, :6] == 1.0).all()
    out2, png = tmp_path / "s.nc", tmp_path / "s.png"
    assert main(["series", str(a), str(b), "--steps", "0", "10", "--metrics", "relative_change", "-o", str(out2), "--plot", str(png), "-q"]) == 0
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
