"""Checkpoints laid out as ``transformers``' ``save_pretrained`` writes them, and their formats.

A folder holds either one weight file (``model.safetensors``) or an index
(``model.safetensors.index.json``) and the shards it names, with
``config.json`` beside them. :class:`SavedFormat` is the registry entry of such
a format (:class:`~toolkit.sources.safetensors_.SafetensorsFormat`,
:class:`~toolkit.sources.torch_bin.TorchBinFormat`): it opens a folder, a
single file or an index, refuses a folder holding both an index and a stray
single file, reads the folder's config, and wraps a quantised checkpoint
(:mod:`toolkit.sources.quantized`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from toolkit.config_keys import normalize_config
from toolkit.errors import AmbiguousCheckpointError
from toolkit.sources._common import check_config_sizes, read_config
from toolkit.sources.base import Source
from toolkit.sources.formats import CheckpointFormat


def folder_config(folder: Path) -> dict:
    """The folder's ``config.json``, normalised, its sizes checked (``{}`` when there is none).

    Raises
    ------
    CheckpointFileError
        The config is no JSON object, or declares a size that is not a positive integer.
    """
    return check_config_sizes(normalize_config(read_config(folder)), folder / "config.json")


def with_folder_facts(src: Source, folder: Path) -> Source:
    """Record on ``src`` the ``config.json`` that is not next to its weights; wrap a quantised
    checkpoint's source (:mod:`toolkit.sources.quantized`).

    Opening still works (a user mapping needs no config); the architecture
    step names the missing file instead of an unknown ``model_type None``.

    Raises
    ------
    UnsupportedQuantizationError
        A ``quantization_config`` whose method or layout is not read.
    """
    config = folder / "config.json"
    if not config.is_file():
        src.missing_config = str(config)
    from toolkit.sources.quantized import quantized_source

    return quantized_source(src)  # a quantization_config: quantised tensors dequantised on read


class SavedFormat(CheckpointFormat):
    """A format of ``save_pretrained`` checkpoints: one weight file, or an index and its shards.

    Attributes
    ----------
    single : str
        The one-file name in a folder (``model.safetensors``).
    index : str
        The index name in a folder (``model.safetensors.index.json``).
    index_suffix : str
        How any index of the format ends (``.safetensors.index.json``).
    suffixes : tuple of str
        Suffixes of the format's single weight files (``(".safetensors",)``).
    source_class : type
        The :class:`~toolkit.sources.Source` with ``from_file(path, *, config,
        location, revision)`` and ``from_index(index_path, ...)``.
    """

    single: ClassVar[str]
    index: ClassVar[str]
    index_suffix: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]]
    source_class: ClassVar[type]

    def guess_can_open(self, path: Path, **options) -> bool:
        """A folder holding :attr:`index` or :attr:`single`, an index file, or a file of :attr:`suffixes`."""
        if path.is_dir():
            return (path / self.index).is_file() or (path / self.single).is_file()
        return path.name.endswith(self.index_suffix) or path.suffix in self.suffixes

    def open(self, path: Path, *, location: str | None = None, revision: str = "", **options) -> Source:
        """Open a folder, an index or a single weight file, with the folder's ``config.json``.

        Raises
        ------
        AmbiguousCheckpointError
            A folder holding both :attr:`index` (and its shards) and a stray :attr:`single`.
        CheckpointFileError
            An unreadable, truncated or corrupted file, an index naming a
            missing shard or a tensor its shard lacks, a bad ``config.json``.
        UnsupportedQuantizationError
            A ``quantization_config`` that is not read.
        """
        folder, target = (path, self._folder_target(path)) if path.is_dir() else (path.parent, path)
        kwargs = dict(config=folder_config(folder), location=location or str(path), revision=revision)
        cls = self.source_class
        src = cls.from_index(target, **kwargs) if target.name.endswith(self.index_suffix) else \
            cls.from_file(target, **kwargs)
        return with_folder_facts(src, folder)

    def open_file(self, path: Path, *, config: dict, location: str) -> Source:
        """The tensors of one weight file as stored: no ``config.json`` read, no quantisation unpacked
        (a LoRA adapter's factors, :class:`toolkit.sources.lora.AdapterSource`).

        Raises
        ------
        CheckpointFileError
            An unreadable, truncated or corrupted file.
        """
        return self.source_class.from_file(path, config=config, location=location)

    def _folder_target(self, folder: Path) -> Path:
        """The index, else the single file, of a folder; refuse a folder with both."""
        index, single = folder / self.index, folder / self.single
        if index.is_file() and single.is_file():
            raise AmbiguousCheckpointError(
                folder, [self.index, self.single],
                f"the folder holds two copies of the weights: a sharded checkpoint ({self.index} and its shards) and "
                f"a single {self.single}; they may come from different saves. Delete the stale one (usually the stray "
                f"{self.single} if the shards are newer), or open one copy explicitly: "
                f"open_source({str(index)!r}) or open_source({str(single)!r})",
            )
        return index if index.is_file() else single
