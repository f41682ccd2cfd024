"""Helpers shared by the format modules: dtype names, fingerprints, configs and
sharded indexes (``transformers``' parameter renamings: :mod:`toolkit.sources.renaming`).

Nothing here reads tensor data.
"""

from __future__ import annotations

import json
import os
import re
import reprlib
from collections.abc import Iterable
from pathlib import Path

import torch

from toolkit.errors import CheckpointFileError
from toolkit.sources.base import Source
from toolkit.sources.identity import files_identity

_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16 -> "bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def snapshot_revision(path: str | os.PathLike) -> str:
    """The commit of a path inside a Hugging Face cache snapshot, else ``""``.

    ``.../models--org--name/snapshots/<commit>/model.safetensors -> "<commit>"``.
    """
    parts = Path(os.path.abspath(path)).parts
    for i in range(len(parts) - 1):
        if parts[i] == "snapshots" and i > 0 and parts[i - 1].startswith("models--") and _HEX40.match(parts[i + 1]):
            return parts[i + 1]
    return ""


def fingerprint(files: Iterable[str | os.PathLike], *, portable: bool = False) -> str:
    """A hex digest identifying the bytes of the weight files (:mod:`toolkit.sources.identity`).

    Changes when any file is replaced, rewritten, grows, shrinks or is touched
    (device, inode, size, mtime and ctime in ns; a hub cache blob's sha256);
    equal for the same files seen through another path.
    """
    return files_identity(files, portable=portable)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 8
_REPR.maxlevel = 3


def shown(value) -> str:
    """``repr(value)`` shortened (long strings, lists and dicts cut with ``...``), for messages about file contents:
    a hostile file's name or value of 90 MB is never copied into an error message whole."""
    return _REPR.repr(value)


def open_failure(path: str | os.PathLike, exc: OSError) -> CheckpointFileError:
    """The error for a weight file that exists but cannot be opened or read (permissions, I/O error...)."""
    hint = (
        "check its permissions (or run as a user that may read it)" if isinstance(exc, PermissionError)
        else "check the file and the disk, or re-download it"
    )
    return CheckpointFileError(path, f"cannot read the file ({type(exc).__name__}: {exc.strerror or exc}); {hint}")


#: Config keys of sizes (after :func:`toolkit.config_keys.normalize_config`) that must be positive integers.
SIZE_KEYS = (
    "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size",
)


def size_problems(config: dict, keys=SIZE_KEYS) -> list[str]:
    """``"key=value"`` for each size of ``config`` (and of its ``text_config``) that is not a positive integer.

    A size may be absent or None (unknown); a per-layer list of counts
    (``num_key_value_heads`` of some GGUF files) is accepted when every entry
    is a non-negative integer.
    """
    from toolkit.config_keys import text_config

    problems = []
    for cfg in {id(c): c for c in (config, text_config(config))}.values():
        for key in keys:
            value = cfg.get(key)
            if value is None:
                continue
            if isinstance(value, list) and value and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
            ):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"{key}={shown(value)}")
    return list(dict.fromkeys(problems))


def check_config_sizes(config: dict, path: str | os.PathLike) -> dict:
    """``config``, after checking that its sizes are positive integers (``path`` names it in the error).

    Raises
    ------
    CheckpointFileError
        A head count, width or layer count of zero, negative, or not an integer.
    """
    problems = size_problems(config)
    if problems:
        raise CheckpointFileError(
            path, f"the config declares {', '.join(problems)}: sizes, layer and head counts must be positive "
            "integers. Fix the config (or use the config.json published with these weights)",
        )
    return config


def read_json(path: Path, what: str) -> dict:
    """Read a JSON object or raise :class:`CheckpointFileError` naming the file (also when it is larger than
    :func:`~toolkit.sources.limits.max_whole_file`, checked before reading)."""
    from toolkit.sources.limits import max_whole_file

    cap = max_whole_file()
    try:
        with open(path, "rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as exc:
        raise CheckpointFileError(path, f"cannot read the {what} as JSON ({exc}); re-download or re-save it") from exc
    if len(raw) > cap:
        raise CheckpointFileError(path, f"the {what} is larger than the {cap} bytes a file read whole may have "
                                  "(TOOLKIT_MAX_WHOLE_FILE); a real file that large: raise TOOLKIT_MAX_WHOLE_FILE")
    return json_object(raw, path, what)


def json_object(raw: bytes, path, what: str) -> dict:
    """``raw`` (the bytes of the file ``path``, local or remote) as a JSON object, or raise
    :class:`CheckpointFileError` naming the file."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointFileError(path, f"cannot read the {what} as JSON ({exc}); re-download or re-save it") from exc
    if not isinstance(data, dict):
        raise CheckpointFileError(path, f"the {what} is not a JSON object; re-download or re-save it")
    return data


def read_index(index_path: Path) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint index: tensor name -> shard file name.

    Raises
    ------
    CheckpointFileError
        The index is not JSON or has no ``weight_map``.
    """
    return weight_map_of(read_json(index_path, "sharded checkpoint index"), index_path)


def weight_map_of(data: dict, index_path) -> dict[str, str]:
    """The checked ``weight_map`` of an index's JSON object (``index_path``, local or remote, names it in errors).

    Raises
    ------
    CheckpointFileError
        No ``weight_map``, or one naming a shard outside the index's folder.
    """
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointFileError(
            index_path, "the index has no 'weight_map' (tensor name -> shard file); re-download or re-save it"
        )
    for name, shard in weight_map.items():
        problem = _shard_name_problem(shard)
        if problem:
            raise CheckpointFileError(
                index_path, f"the weight_map puts tensor {name!r} in {shard!r}, {problem}. The index must name "
                "shard files next to it: re-download or re-save the checkpoint (and do not open an index of "
                "unknown origin)",
            )
    return dict(weight_map)


def missing_from_shard(index_path, shard_name: str, wanted, held) -> None:
    """Raise when the shard ``shard_name`` lacks a tensor the index puts in it.

    Parameters
    ----------
    index_path : path-like or str
        The index (local or remote), named in the error.
    shard_name : str
        The shard's file name.
    wanted : iterable of str
        The tensors the index puts in the shard.
    held : container of str
        The tensors the shard holds.

    Raises
    ------
    CheckpointFileError
        Naming how many are missing and the first.
    """
    absent = [k for k in wanted if k not in held]
    if absent:
        raise CheckpointFileError(
            index_path,
            f"the index puts {len(absent)} tensor(s) in {shard_name} that it does not hold "
            f"(first: {absent[0]!r}); the shard and the index come from different saves. "
            "Download both again, or re-save the checkpoint.",
        )


def _shard_name_problem(shard) -> str:
    """Why ``shard`` is no file name inside the index's folder (``""`` when it is one)."""
    if not isinstance(shard, str) or not shard:
        return "which is not a file name"
    if "\0" in shard:
        return "a name with a NUL character"
    if os.path.isabs(shard) or shard.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", shard):
        return "an absolute path: shards must lie in the checkpoint's folder"
    parts = re.split(r"[/\\]", shard)
    if ".." in parts:
        return "a path that leads out of the checkpoint's folder"
    return ""


def shards_of(index_path: Path, weight_map: dict[str, str]) -> list[Path]:
    """Shard files an index names, in order, each checked to exist.

    Raises
    ------
    CheckpointFileError
        A shard the index names is missing from the directory.
    """
    folder = index_path.parent
    shards = sorted(set(weight_map.values()))
    for s in shards:  # read_index refuses them; an index built by hand must not lead elsewhere either
        if _shard_name_problem(s):
            raise CheckpointFileError(index_path, f"the index names shard {s!r}, {_shard_name_problem(s)}")
    missing = [s for s in shards if not (folder / s).is_file()]
    if missing:
        n = sum(1 for v in weight_map.values() if v in missing)
        raise CheckpointFileError(
            index_path,
            f"the index names shard(s) {', '.join(missing)} ({n} tensors) that are not in {str(folder)!r}. "
            "Download the missing shard(s) again (for a hub id: open_source(repo_id) while online), "
            "or re-save the checkpoint.",
        )
    return [folder / s for s in shards]


def read_config(folder: Path) -> dict:
    """``config.json`` of a checkpoint folder as a dict, ``{}`` when there is none."""
    path = folder / "config.json"
    return read_json(path, "config.json") if path.is_file() else {}


class FileSource(Source):
    """A :class:`Source` over weight files on local disk (the format classes' base).

    Parameters
    ----------
    location : str
        What to show as the source (a path, or the hub id it came from).
    format : str
        ``"safetensors"``, ``"pytorch"`` or ``"gguf"``.
    config : dict
        The normalised ``transformers`` config.
    files : list of path-like
        The weight files; the fingerprint covers all of them.
    revision : str, default ""
        Hub commit; found from a cache snapshot path when not given.
    """

    def __init__(self, *, location: str, format: str, config: dict, files: list, revision: str = ""):
        self.location = str(location)
        self.format = format
        self.config = config
        self._files = [str(f) for f in files]
        self.fingerprint = fingerprint(self._files)
        self.revision = revision or (snapshot_revision(self._files[0]) if self._files else "")

    def files(self) -> list[str]:
        """The weight files this source reads, absolute paths."""
        return list(self._files)
