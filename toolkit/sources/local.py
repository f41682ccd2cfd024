"""Local paths: a weight file, or a checkpoint folder, opened by the registered format that reads it.

The formats (:mod:`toolkit.sources.formats`) are asked in order whether they
read the path; the built-ins read a folder as ``transformers`` reads it: the
sharded safetensors index, else ``model.safetensors``, else the ``.bin``
equivalents, else a LoRA adapter, else a GGUF file by ``gguf_file=`` (or the
folder's only ``.gguf``). Two copies of one kind of weights in one folder
(index + shards and a stray single file) are refused rather than guessed between.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.errors import CheckpointFileError, SourceNotFoundError, ToolkitError
from toolkit.sources.base import Source
from toolkit.sources.formats import guess_format

#: Suffixes of files that look like weights, named in the message of a folder no format reads.
_WEIGHT_LIKE = (".safetensors", ".bin", ".pt", ".pth")


def open_local(path: str | os.PathLike, *, gguf_file: str | None = None, location: str | None = None,
               revision: str = "") -> Source:
    """Open a local weight file or checkpoint folder.

    Parameters
    ----------
    path : path-like
        A ``.safetensors``/``.bin``/``.gguf`` file, a sharded index ``.json``,
        a checkpoint or adapter folder, or a file or folder of a registered format.
    gguf_file : str, optional
        With a folder: the name of the GGUF file in it to open.
    location : str, optional
        Shown as the source's ``location`` (default: the absolute path of the
        folder, or of the file opened: the ``.gguf`` when one is chosen).
    revision : str, default ""
        Hub commit when the folder is a hub snapshot (found from the path otherwise).

    Returns
    -------
    Source

    Raises
    ------
    SourceNotFoundError
        No such path, no weight files in the folder, or ``gguf_file`` not there.
    AmbiguousCheckpointError
        The folder holds both a sharded index and a stray single weight file.
    CheckpointFileError
        A file of no registered format, a weight file that is truncated or
        corrupted, or an index naming a missing shard or a tensor its shard lacks.
    """
    path = Path(os.path.abspath(os.path.expanduser(path)))
    if not (path.is_file() or path.is_dir()):
        raise SourceNotFoundError(path, "no such file or directory")
    options = {"gguf_file": gguf_file} if gguf_file else {}
    fmt = guess_format(path, **options)
    if fmt is None:
        raise _unreadable(path)
    taken = {k: v for k, v in options.items() if k in fmt.open_parameters}
    return fmt.open(path, location=location, revision=revision, **taken)


def _readable(folder: Path) -> bool:
    """Whether a registered format reads ``folder`` (a look at its file names, nothing opened)."""
    try:
        return guess_format(folder) is not None
    except (OSError, ToolkitError):
        return False


def _unreadable(path: Path) -> Exception:
    """The error for a path no registered format reads."""
    if path.is_file():
        return CheckpointFileError(
            path, "unknown weight file type: expected .safetensors, .bin/.pt, .gguf, or a sharded index "
            "(model.safetensors.index.json); pass the checkpoint folder to let the toolkit choose"
        )
    others = sorted(p.name for p in path.iterdir() if p.suffix in _WEIGHT_LIKE)
    hint = f" Other weight-like files there: {', '.join(others)}; pass one of them as a path." if others else ""
    inside = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))
                    and _readable(p))
    if inside:  # a package folder with its weights in model/, a run with its checkpoint in final/
        hint += (f" The subfolder{'s' if len(inside) > 1 else ''} {', '.join(p.name + '/' for p in inside)} "
                 f"hold{'' if len(inside) > 1 else 's'} a checkpoint: pass {inside[0]}.")
    return SourceNotFoundError(
        path, "no weight files: expected model.safetensors, model.safetensors.index.json + shards, "
        "pytorch_model.bin(.index.json) or a .gguf file." + hint
    )
