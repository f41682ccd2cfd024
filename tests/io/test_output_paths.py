"""One writer for every output path (issue 43): a path that exists and is not a regular file (a device, a FIFO, a
socket, a folder) is refused with ``OutputPathError`` before anything is written; a symbolic link is followed and
its target replaced; ``-o /dev/null`` and ``-o -`` are written through by the command line."""

from __future__ import annotations

import os
import socket
import stat
import sys

import numpy as np
import pytest
import xarray as xr

import toolkit
from toolkit.atomic import atomic_dir, atomic_path, atomic_write, output_target
from toolkit.cli import main
from toolkit.errors import OutputPathError
from toolkit.testing import write_tiny_checkpoint


def _ds() -> xr.Dataset:
    return xr.Dataset({"alpha": (("layer", "component"), np.arange(6.0).reshape(3, 2))},
                      coords={"layer": [0, 1, 2], "component": ["attn.q", "attn.k"]})


def _fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _socket(tmp_path):
    path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return path, s


def _writers():
    """Every writer that takes a user's path, as ``name -> write(path)``."""
    def export(path):
        import toolkit.widgets

        toolkit.widgets.export_html(_ds(), path, metrics="alpha")

    def figure(path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from toolkit.cli.base import save_figure

        save_figure(plt.figure(), str(path))

    def atomic(path):
        with atomic_write(path) as f:
            f.write("x")

    return {"save": lambda p: toolkit.save(_ds(), p), "export_html": export, "save_figure": figure,
            "atomic_write": atomic}


WRITERS = _writers()


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("kind", ["fifo", "socket", "folder", "link to a fifo"])
def test_what_is_not_a_regular_file_is_refused_before_anything_is_written(writer, kind, tmp_path):
    if kind == "socket":
        path, keep = _socket(tmp_path)
    elif kind == "folder":
        path = tmp_path / "out.x"
        path.mkdir()
    elif kind == "fifo":
        path = _fifo(tmp_path)
    else:
        path = tmp_path / "link"
        path.symlink_to(_fifo(tmp_path))
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(OutputPathError) as info:  # a FIFO opened for writing would block: it must not be
        WRITERS[writer](path)
    assert str(path) in str(info.value)
    assert {"fifo": "FIFO", "socket": "socket", "folder": "folder", "link to a fifo": "FIFO"}[kind] \
        in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file left, nothing replaced
    if kind == "link to a fifo":
        assert path.is_symlink() and stat.S_ISFIFO(os.stat(path).st_mode)


@pytest.mark.parametrize("writer", ["save", "atomic_write"])
def test_dev_null_stays_a_character_device(writer):
    with pytest.raises(OutputPathError, match="is a character device, not a regular file.*/dev/null"):
        WRITERS[writer]("/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_is_followed_and_its_target_replaced(tmp_path):
    target = tmp_path / "real.nc"
    target.write_bytes(b"old")
    link = tmp_path / "link.nc"
    link.symlink_to(target)
    toolkit.save(_ds(), link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    np.testing.assert_array_equal(toolkit.load(target).alpha.values, _ds().alpha.values)
    dangling = tmp_path / "dangling.nc"
    dangling.symlink_to(tmp_path / "new.nc")
    toolkit.save(_ds(), dangling)
    assert dangling.is_symlink() and (tmp_path / "new.nc").is_file()


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_nul_in_the_path_is_a_typed_error(writer, tmp_path):
    with pytest.raises(OutputPathError, match="NUL character"):
        WRITERS[writer](str(tmp_path / "a\x00b.html"))


def test_a_folder_writer_refuses_a_device_and_replaces_a_folder(tmp_path):
    with pytest.raises(OutputPathError, match="FIFO"), atomic_dir(_fifo(tmp_path)):
        pass
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old").write_text("x")
    with atomic_dir(tmp_path / "d") as tmp:
        (tmp / "new").write_text("y")
    assert os.listdir(tmp_path / "d") == ["new"]
    assert output_target(tmp_path / "missing") == tmp_path / "missing"
    with pytest.raises(OutputPathError, match="folder"), atomic_path(tmp_path / "d"):
        pass


def test_the_cli_writes_through_dev_null_and_stdout(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    ckpt = write_tiny_checkpoint(tmp_path / "ckpt", "llama")
    args = ["weights", str(ckpt), "--metrics", "frobenius_norm", "-q"]
    assert main([*args, "-o", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert "discarded" in capfd.readouterr().err
    out = tmp_path / "stdout.nc"
    with open(out, "wb") as f:
        monkeypatch.setattr(sys, "stdout", open(f.fileno(), "w", closefd=False))
        assert main([*args, "-o", "-"]) == 0
        sys.stdout.flush()
    monkeypatch.undo()
    ds = toolkit.load(out)
    assert float(ds.frobenius_norm.max()) > 0
    fifo = _fifo(tmp_path)
    assert main([*args, "-o", str(fifo)]) == 2
    assert "FIFO" in capfd.readouterr().err and stat.S_ISFIFO(os.stat(fifo).st_mode)
