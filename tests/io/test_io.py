"""NetCDF save/load: attrs round-trip, atomic writes, clear errors."""

import errno
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from toolkit.errors import (
    CheckpointFileError,
    InvalidOptionError,
    OutputPathError,
    ResultsFileError,
    ResultsNotFoundError,
    SourceNotFoundError,
    ToolkitError,
)
from toolkit.io import check_output_path, load, save


def _ds():
    ds = xr.Dataset(
        {"stable_rank": (("layer", "component"), np.arange(6.0).reshape(3, 2),
                         {"long_name": "stable rank", "units": "1"})},
        coords={"layer": [0, 1, 2], "component": ["attn.q", "attn.k"],
                "parameter_name": (("layer", "component"), np.array([["a", "b"]] * 3))},
    )
    ds.attrs.update({"source": "x", "tied": True, "revision": None, "config": {"a": 1, "b": [1, 2]}, "n": 28})
    ds["stable_rank"].attrs["flag"] = False
    return ds


def test_round_trip_keeps_values_and_encoded_attrs(tmp_path):
    ds = _ds()
    path = save(ds, tmp_path / "sub" / "a.nc")
    back = load(path)
    xr.testing.assert_identical(back.drop_attrs(), ds.drop_attrs())
    assert back.attrs["tied"] is True
    assert back.attrs["revision"] is None
    assert back.attrs["config"] == {"a": 1, "b": [1, 2]}
    assert back.attrs["n"] == 28
    assert back["stable_rank"].attrs["flag"] is False
    assert back["parameter_name"].values[2, 1] == "b"


def test_interrupted_save_leaves_previous_file(tmp_path, monkeypatch):
    path = save(_ds(), tmp_path / "a.nc")
    before = path.read_bytes()

    def boom(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.Dataset, "to_netcdf", boom)
    with pytest.raises(KeyboardInterrupt):
        save(_ds(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.nc"]  # no temp file left


def test_load_missing_file(tmp_path):
    with pytest.raises(ResultsNotFoundError, match="no such file") as err:
        load(tmp_path / "nope.nc")
    msg = str(err.value)
    assert msg.startswith(f"no results file {str(tmp_path / 'nope.nc')!r}: no such file")
    assert "written by toolkit.save" in msg and "check the path" in msg and "checkpoint" not in msg
    assert err.value.path == str(tmp_path / "nope.nc")
    assert isinstance(err.value, SourceNotFoundError) and isinstance(err.value, FileNotFoundError)
    with pytest.raises(ResultsNotFoundError, match="it is a folder, not a statistics file.*toolkit.weight_stats"):
        load(tmp_path)


def test_load_not_netcdf(tmp_path):
    p = tmp_path / "bad.nc"
    p.write_text("hello")
    with pytest.raises(ResultsFileError, match="not a NetCDF4 file: it is a text file starting with 'hello'") as err:
        load(p)
    assert str(err.value).startswith(f"bad results file {str(p)!r}: ")
    assert isinstance(err.value, CheckpointFileError)


def test_save_refuses_a_dataarray_with_the_fix():
    da = _ds().stable_rank
    with pytest.raises(InvalidOptionError, match=r"(?s)toolkit.save: ds=.* must be an xarray.Dataset, not a DataArray: "
                                                 r"pass a Dataset, e\.g\. da\.to_dataset\(\)"):
        save(da, "unused.nc")
    with pytest.raises(InvalidOptionError, match=r"da\.to_dataset\(name='my_metric'\)"):
        save(da.rename(None), "unused.nc")
    with pytest.raises(InvalidOptionError, match="not dict"):
        save({}, "unused.nc")
    assert not Path("unused.nc").exists()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_saved_file_gets_the_mode_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        p = save(_ds(), tmp_path / "a.nc")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644  # 0o666 less the umask, not mkstemp's 0o600
        os.umask(0o027)
        assert stat.S_IMODE(save(_ds(), tmp_path / "b.nc").stat().st_mode) == 0o640
        os.chmod(p, 0o604)  # a file replaced keeps its mode, as with open(p, "w")
        save(_ds(), p)
        assert stat.S_IMODE(p.stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_save_to_a_bad_path_names_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    for target, expected in [
        (str(tmp_path) + "/", "it is a folder; give a file name inside it, e.g."),
        (tmp_path, "it is a folder"),
        (tmp_path / "afile" / "x.nc", f"{str(tmp_path / 'afile')!r} is a file, not a folder"),
    ]:
        with pytest.raises(OutputPathError, match=expected) as err:
            save(_ds(), target)
        assert str(err.value).startswith("cannot write ")
        assert isinstance(err.value, OSError) and isinstance(err.value, ToolkitError)
    if Path("/proc/self").is_dir():
        with pytest.raises(OutputPathError, match=r"cannot write '/proc/x.nc': cannot create a file in '/proc' \("):
            save(_ds(), "/proc/x.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_oserror_while_writing_becomes_output_path_error(tmp_path, monkeypatch):
    path = save(_ds(), tmp_path / "a.nc")
    before = path.read_bytes()

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", full)
    with pytest.raises(OutputPathError, match="No space left on device; check the free space") as err:
        save(_ds(), path)
    assert err.value.errno == errno.ENOSPC and err.value.path == str(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.nc"]  # no temp file left


def test_check_output_path(tmp_path):
    assert check_output_path(tmp_path / "new" / "deep" / "o.nc") == tmp_path / "new" / "deep" / "o.nc"
    assert list(tmp_path.iterdir()) == []  # no folder created, no probe file left
    with pytest.raises(OutputPathError, match=r"-o is a folder; give a file name inside it, e\.g\. .*plot\.png"):
        check_output_path(tmp_path, "-o", "plot.png")


def test_load_file_from_newer_format_names_the_version(tmp_path):
    ds = _ds()
    p = save(ds, tmp_path / "a.nc")
    raw = xr.open_dataset(p, engine="h5netcdf").load()
    raw.attrs["toolkit_format_version"] = 99
    raw.attrs["toolkit_version"] = "9.9.9"
    raw.to_netcdf(tmp_path / "new.nc", engine="h5netcdf")
    with pytest.raises(CheckpointFileError, match=r"written by toolkit 9\.9\.9 in on-disk format 99"):
        load(tmp_path / "new.nc")
