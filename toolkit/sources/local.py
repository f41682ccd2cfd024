"""Local paths: a weight file, or a checkpoint folder, to the right format class.

A folder is read as ``transformers`` reads it: the sharded safetensors index,
else ``model.safetensors``, else the ``.bin`` equivalents; a GGUF file by
``gguf_file=`` (or the folder's only ``.gguf``). Two copies of one kind of
weights in one folder (index + shards and a stray single file) are refused
rather than guessed between.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.config_keys import normalize_config
from toolkit.errors import AmbiguousCheckpointError, CheckpointFileError, SourceNotFoundError
from toolkit.sources._common import check_config_sizes, read_config
from toolkit.sources.base import Source

_SINGLE_SUFFIXES = {".safetensors": "safetensors", ".bin": "pytorch", ".pt": "pytorch", ".pth": "pytorch"}
_SETS = (
    ("safetensors", "model.safetensors.index.json", "model.safetensors"),
    ("pytorch", "pytorch_model.bin.index.json", "pytorch_model.bin"),
)
_INDEX_SUFFIXES = {".safetensors.index.json": "safetensors", ".bin.index.json": "pytorch"}


def _source_class(kind: str):
    if kind == "safetensors":
        from toolkit.sources.safetensors_ import SafetensorsSource

        return SafetensorsSource
    from toolkit.sources.torch_bin import TorchBinSource

    return TorchBinSource


def _open_gguf(path: Path, location: str | None, revision: str) -> Source:
    from toolkit.sources.gguf import GGUFSource

    return GGUFSource(path, location=location, revision=revision)


def _folder_config(folder: Path) -> dict:
    """The folder's ``config.json``, normalised, its sizes checked (``{}`` when there is none)."""
    return check_config_sizes(normalize_config(read_config(folder)), folder / "config.json")


def _note_missing_config(src: Source, folder: Path) -> Source:
    """Record on ``src`` the ``config.json`` that is not next to its weights; wrap a quantised
    checkpoint's source (:mod:`toolkit.sources.quantized`).

    Opening still works (a user mapping needs no config); the architecture
    step names the missing file instead of an unknown ``model_type None``.
    """
    config = folder / "config.json"
    if not config.is_file():
        src.missing_config = str(config)
    from toolkit.sources.quantized import quantized_source

    return quantized_source(src)  # a quantization_config: quantised tensors dequantised on read


def _open_file(path: Path, gguf_file: str | None, location: str | None, revision: str) -> Source:
    name = path.name
    if name.endswith(".gguf"):
        if gguf_file and gguf_file != name:
            raise SourceNotFoundError(
                path, f"gguf_file={gguf_file!r} names another file than the .gguf path given; pass the folder "
                "with gguf_file=..., or the .gguf path alone"
            )
        return _open_gguf(path, location, revision)
    config = _folder_config(path.parent)
    kwargs = dict(config=config, location=location or str(path), revision=revision)
    for suffix, kind in _INDEX_SUFFIXES.items():
        if name.endswith(suffix):
            return _note_missing_config(_source_class(kind).from_index(path, **kwargs), path.parent)
    if path.suffix in _SINGLE_SUFFIXES:
        src = _source_class(_SINGLE_SUFFIXES[path.suffix]).from_file(path, **kwargs)
        return _note_missing_config(src, path.parent)
    raise CheckpointFileError(
        path, "unknown weight file type: expected .safetensors, .bin/.pt, .gguf, or a sharded index "
        "(model.safetensors.index.json); pass the checkpoint folder to let the toolkit choose"
    )


def _open_dir(folder: Path, gguf_file: str | None, location: str | None, revision: str) -> Source:
    if gguf_file:
        path = folder / gguf_file
        if not path.is_file():
            ggufs = sorted(p.name for p in folder.glob("*.gguf"))
            raise SourceNotFoundError(
                path, f"no file {gguf_file!r} in {str(folder)!r}; GGUF files there: {', '.join(ggufs) or 'none'}. "
                "Pass one of those as gguf_file=, or the full path of the .gguf file"
            )
        return _open_gguf(path, location, revision)
    for kind, index, single in _SETS:
        has_index, has_single = (folder / index).is_file(), (folder / single).is_file()
        if has_index and has_single:
            raise AmbiguousCheckpointError(
                folder, [index, single],
                f"the folder holds two copies of the weights: a sharded checkpoint ({index} and its shards) and a "
                f"single {single}; they may come from different saves. Delete the stale one (usually the stray "
                f"{single} if the shards are newer), or open one copy explicitly: "
                f"open_source({str(folder / index)!r}) or open_source({str(folder / single)!r})",
            )
        if has_index or has_single:
            config = _folder_config(folder)
            kwargs = dict(config=config, location=location or str(folder), revision=revision)
            cls = _source_class(kind)
            src = cls.from_index(folder / index, **kwargs) if has_index else cls.from_file(folder / single, **kwargs)
            return _note_missing_config(src, folder)
    from toolkit.sources.lora import AdapterSource, is_adapter_folder

    if is_adapter_folder(folder):  # a PEFT LoRA adapter (no full weights beside it)
        return AdapterSource(folder)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return _open_gguf(ggufs[0], location, revision)
    if ggufs:
        raise SourceNotFoundError(
            folder, f"the folder holds several GGUF files ({', '.join(p.name for p in ggufs)}); choose one with "
            "gguf_file='...'"
        )
    others = sorted(p.name for p in folder.iterdir() if p.suffix in _SINGLE_SUFFIXES)
    hint = f" Other weight-like files there: {', '.join(others)}; pass one of them as a path." if others else ""
    raise SourceNotFoundError(
        folder, "no weight files: expected model.safetensors, model.safetensors.index.json + shards, "
        "pytorch_model.bin(.index.json) or a .gguf file." + hint
    )


def open_local(path: str | os.PathLike, *, gguf_file: str | None = None, location: str | None = None,
               revision: str = "") -> Source:
    """Open a local weight file or checkpoint folder.

    Parameters
    ----------
    path : path-like
        A ``.safetensors``/``.bin``/``.gguf`` file, a sharded index ``.json``,
        or a checkpoint folder.
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
        A weight file that is truncated or corrupted, or an index naming a
        missing shard or a tensor its shard lacks.
    """
    path = Path(os.path.abspath(os.path.expanduser(path)))
    if path.is_file():
        return _open_file(path, gguf_file, location, revision)
    if path.is_dir():
        return _open_dir(path, gguf_file, location, revision)
    raise SourceNotFoundError(path, "no such file or directory")
