"""Writing a watched run's store: one NetCDF file per record (the layout: :mod:`toolkit.io.records`).

Why a folder of files rather than one appendable file (Zarr's ``to_zarr(append_dim=...)``, a NetCDF
unlimited dimension): an append writes the new chunks and then rewrites shared metadata, and a run
killed between the two leaves a store its readers must repair; here each record is written whole and
renamed into place by :func:`toolkit.save`, so a killed run loses at most the record being written (its
temporary file is swept by the next writer), a reader never sees half a record, ``toolkit.load`` reads
the store while the run goes on, and re-opening the store resumes after its last record. No dependency
beyond NetCDF's.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import xarray as xr

from toolkit.atomic import atomic_path, atomic_write
from toolkit.errors import OutputPathError
from toolkit.io import save
from toolkit.io.records import MARKER, record_name, record_steps
from toolkit.monitor.worker import lower_priority


class RecordStore:
    """A watch store folder (created when missing).

    Parameters
    ----------
    path : str or path-like
        The folder.
    info : dict
        What is watched (JSON-able), written to ``watch.json``. A store that exists must have been written
        with the same metrics (its records are then kept, and the run resumes after the last).

    Raises
    ------
    OutputPathError
        The folder cannot be created or written (checked by writing ``watch.json`` now, before the first
        record), it exists and is not a watch store (a file, or a folder with other files), or it holds a
        run watched otherwise (:data:`RESUME_KEYS`: other metrics, cadence, model class, family or layout).
    """

    def __init__(self, path: str | os.PathLike, info: dict):
        text = os.fspath(path)
        if "\x00" in str(text):
            raise _refused(Path(str(text).replace("\x00", "\\x00")), "the path holds a NUL character, which no "
                           "file name can", "check how the path was made")
        self.path = Path(os.path.expanduser(text))
        marker = self.path / MARKER
        if self.path.exists() and not self.path.is_dir():
            raise _refused(self.path, "it exists and is not a folder", "give a new folder name for the watch store")
        if self.path.is_dir() and not marker.is_file() and any(self.path.iterdir()):
            raise _refused(self.path, "it is a folder with files and no watch.json (not a watch store)",
                           "give a new or empty folder, or the folder of an earlier watched run")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if marker.is_file():
                old = json.loads(marker.read_text(encoding="utf-8"))
                for key in RESUME_KEYS:  # a run resumes only as the same run: no record of another model mixed in
                    if key in old and key in info and old[key] != info[key]:
                        raise _refused(self.path, f"it holds a run watched with {key} {old[key]!r}, not "
                                       f"{info[key]!r}", f"give another folder, or the same {key} to resume")
            with atomic_write(marker) as f:
                json.dump(info, f, indent=1, sort_keys=True)
        except OutputPathError:
            raise
        except (OSError, ValueError) as exc:
            raise _refused(self.path, f"the watch store cannot be written ({getattr(exc, 'strerror', '') or exc})",
                           "give a folder on a writable disk with free space", getattr(exc, "errno", None)) from exc

    def save_start(self, step: int, matrices: dict) -> None:
        """Keep the run's first record's matrices (``{key: tensor}``, the floating-point ones) in
        :data:`START`, so that a resumed run measures its updates since the first record
        (:meth:`load_start`). Written whole and renamed into place, like a record.

        Raises
        ------
        OutputPathError
            The file cannot be written (disk full, folder removed).
        """
        from safetensors.torch import save_file

        tensors = {json.dumps(list(key)): t.detach().contiguous() for key, t in matrices.items()
                   if t.is_floating_point()}
        try:
            with atomic_path(self.path / START) as tmp:
                save_file(tensors, str(tmp), metadata={"step": str(int(step))})
        except OutputPathError:
            raise
        except OSError as exc:
            raise _refused(self.path, f"the first record's matrices cannot be written ({exc.strerror or exc})",
                           "free disk space or give another store", exc.errno) from exc

    def load_start(self) -> tuple[int, dict] | None:
        """``(step, {key: tensor})`` of the matrices :meth:`save_start` kept, or None (a store written
        before they were kept, or whose file cannot be read: the updates since the first record are then
        NaN with the reason)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file, safe_open

        path = self.path / START
        try:
            with safe_open(str(path), framework="pt") as f:
                step = int((f.metadata() or {})["step"])
            return step, {tuple(json.loads(name)): t for name, t in load_file(str(path)).items()}
        except (OSError, SafetensorError, KeyError, ValueError, TypeError):
            return None

    def steps(self) -> list[int]:
        """The steps recorded in the store, ascending."""
        return record_steps(self.path)

    def append(self, record: xr.Dataset) -> Path:
        """Write one record (a Dataset with a ``step`` dimension of length 1) as its own file.

        Raises
        ------
        OutputPathError
            The record cannot be written (disk full, folder removed); nothing is left half-written.
        """
        step = int(record["step"].values[0])
        if not (self.path / MARKER).is_file():  # save() would make the folder again, a store nobody can load
            raise _refused(self.path, f"the record of step {step} has no store to go to: its {MARKER} is gone (the "
                           "folder was deleted or moved while the run went on)",
                           "watch again with a new store folder (toolkit.watch(model, store=...))")
        try:
            return save(record, self.path / record_name(step))
        except OutputPathError:
            raise
        except OSError as exc:
            raise _refused(self.path, f"the record of step {step} cannot be written ({exc.strerror or exc})",
                           "free disk space or give another store", exc.errno) from exc


class BackgroundWrite:
    """``write(*args)`` on a daemon thread of its own, at the worker's priority
    (:func:`~toolkit.monitor.worker.lower_priority`): the monitor writes the first record's matrices
    (:meth:`RecordStore.save_start`) this way, beside the training and the next records (safetensors' writer
    releases the GIL while it writes). :meth:`join` waits for it and raises its error, once.
    """

    def __init__(self, write: Callable, *args):
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write, *args), name="toolkit-watch-write",
                                        daemon=True)
        self._thread.start()

    def _run(self, write: Callable, *args) -> None:
        lower_priority()
        try:
            write(*args)
        except Exception as exc:  # noqa: BLE001 - raised on the caller's thread by join()
            self._error = exc

    def join(self) -> None:
        """Wait for the write to end; raise its error (once: a second call returns)."""
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


#: The first record's matrices, for a resumed run's updates since the first record (:meth:`RecordStore.save_start`).
START = "start.safetensors"
#: What a store's ``watch.json`` and a resuming monitor must agree on (those an older store lacks are not compared).
RESUME_KEYS = ("metrics", "model", "family", "every", "spectral_every", "layers", "components")


def _refused(path: Path, reason: str, fix: str, errno: int | None = None) -> OutputPathError:
    return OutputPathError(str(path), f"{reason}; {fix}", errno)
