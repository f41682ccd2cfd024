"""NetCDF save/load: attrs round-trip, atomic writes, clear errors."""

import numpy as np
import pytest
import xarray as xr

from toolkit.errors import CheckpointFileError, SourceNotFoundError
from toolkit.io import load, save


def _ds():
    ds = xr.Dataset(
        {"stable_rank": (("layer", "component"), np.arange(6.0).reshape(3, 2), {"long_name": "stable rank", "units": "1"})},
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
    with pytest.raises(SourceNotFoundError, match="no such file"):
        load(tmp_path / "nope.nc")


def test_load_not_netcdf(tmp_path):
    p = tmp_path / "bad.nc"
    p.write_text("hello")
    with pytest.raises(CheckpointFileError, match="not a readable NetCDF file"):
        load(p)


def test_load_file_from_newer_format_names_the_version(tmp_path):
    ds = _ds()
    p = save(ds, tmp_path / "a.nc")
    raw = xr.open_dataset(p, engine="h5netcdf").load()
    raw.attrs["toolkit_format_version"] = 99
    raw.attrs["toolkit_version"] = "9.9.9"
    raw.to_netcdf(tmp_path / "new.nc", engine="h5netcdf")
    with pytest.raises(CheckpointFileError, match=r"written by toolkit 9\.9\.9 in on-disk format 99"):
        load(tmp_path / "new.nc")
