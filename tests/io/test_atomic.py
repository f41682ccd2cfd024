"""The one atomic-write helper: complete files or none, no temporary left behind, open()'s permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from toolkit.atomic import atomic_dir, atomic_path, atomic_write, create_temp


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_atomic_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.json"
    with atomic_write(path) as f:
        json.dump({"x": "é"}, f)
        assert not path.exists()  # nothing under the final name before the writer is done
    assert json.loads(path.read_text(encoding="utf-8")) == {"x": "é"}
    with atomic_write(path, "wb") as f:
        f.write(b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["a.json"]


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()])
def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path, error):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(type(error)):
        with atomic_write(path) as f:
            f.write("half of the new content")
            f.flush()
            raise error
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]
    with pytest.raises(type(error)):
        with atomic_path(tmp_path / "new.nc") as tmp:
            tmp.write_bytes(b"partial")
            raise error
    assert os.listdir(tmp_path) == ["a.txt"]  # no new file, no temporary


def test_a_failed_rename_removes_the_temporary(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "inside").write_text("kept")
    with pytest.raises(OSError):
        with atomic_write(tmp_path / "folder") as f:  # a file cannot replace a non-empty folder
            f.write("x")
    assert sorted(os.listdir(tmp_path)) == ["folder"] and (tmp_path / "folder" / "inside").read_text() == "kept"


def test_atomic_path_hands_writers_a_path_next_to_the_target(tmp_path):
    path = tmp_path / "stats.nc"
    with atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.exists() and tmp.name.startswith(".stats.nc.")
        assert tmp.name.endswith(".tmp")
        tmp.write_bytes(b"data")  # writers open the path themselves (to_netcdf, torch.save)
    assert path.read_bytes() == b"data" and os.listdir(tmp_path) == ["stats.nc"]


def test_new_files_get_open_s_permissions_and_replaced_files_keep_theirs(tmp_path, umask_022):
    with atomic_write(tmp_path / "a") as f:
        f.write("x")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o644  # 0o666 less the umask, not mkstemp's 0o600
    os.umask(0o077)
    with atomic_write(tmp_path / "b") as f:
        f.write("x")
    assert stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o600
    os.chmod(tmp_path / "a", 0o604)
    with atomic_path(tmp_path / "a") as tmp:
        tmp.write_text("y")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o604 and (tmp_path / "a").read_text() == "y"
    fd, probe = create_temp(tmp_path / "c")
    os.close(fd)
    assert stat.S_IMODE(probe.stat().st_mode) == 0o600 and probe.name.startswith(".c.")


def test_atomic_write_takes_whole_file_modes_only(tmp_path):
    for mode in ("a", "r+", "x"):
        with pytest.raises(ValueError, match="mode"):
            with atomic_write(tmp_path / "a", mode):
                pass
    assert os.listdir(tmp_path) == []


def test_atomic_dir_replaces_a_folder_only_when_complete(tmp_path, umask_022):
    path = tmp_path / "step-00001"
    with atomic_dir(path) as tmp:
        (tmp / "model.safetensors").write_bytes(b"v1")
        assert not path.exists() and tmp.name.startswith(".step-00001.")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    with pytest.raises(RuntimeError):
        with atomic_dir(path) as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise RuntimeError("killed")
    assert (path / "model.safetensors").read_bytes() == b"v1"
    with atomic_dir(path) as tmp:
        (tmp / "config.json").write_text("{}")
    assert sorted(os.listdir(path)) == ["config.json"]  # the old folder's files are gone with it
    assert os.listdir(tmp_path) == ["step-00001"]  # no temporary or old folder left; globs see only finals
    assert [p.name for p in tmp_path.glob("step-*")] == ["step-00001"]


def test_every_writer_of_the_toolkit_uses_the_helper():
    """No copy of write-to-temporary-then-rename is left outside toolkit/atomic.py."""
    from pathlib import Path

    import toolkit

    root = Path(toolkit.__file__).parent
    copies = [str(p.relative_to(root)) for p in root.rglob("*.py")
              if p.name != "atomic.py" and ("os.replace(" in p.read_text() or "mkstemp(" in p.read_text())]
    assert copies == []
