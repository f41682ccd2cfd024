"""Opening a remote checkpoint: choosing its weight files and the reader of their format."""

from __future__ import annotations

from toolkit.config_keys import normalize_config
from toolkit.errors import SourceNotFoundError
from toolkit.redaction import redact
from toolkit.sources._common import check_config_sizes
from toolkit.sources.base import Source
from toolkit.sources.remote.folders import RemoteFolder, is_url, url_folder
from toolkit.sources.remote.safetensors import RemoteSafetensorsSource, read_remote_json

#: The weight files looked for in a folder, in order (as ``transformers`` looks for them).
WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
                "pytorch_model.bin")
#: Files read in place; the others (a LoRA adapter) are downloaded.
READ_IN_PLACE = (".safetensors", ".safetensors.index.json", ".gguf", ".bin", ".bin.index.json")


def reads_in_place(name: str) -> bool:
    """Whether the weight file ``name`` is read in place (a LoRA adapter's file is downloaded with its
    ``adapter_config.json``)."""
    return name.endswith(READ_IN_PLACE) and not name.rsplit("/", 1)[-1].startswith("adapter_model.")


def weight_target(folder: RemoteFolder, gguf_file: str | None = None) -> str:
    """The file of a URL folder to open: ``gguf_file``, else its sharded safetensors index, else
    ``model.safetensors``; ``""`` when it has none of them.

    Raises
    ------
    RemoteReadError, RemoteAccessError
        A HEAD request failed.
    """
    if gguf_file:
        return gguf_file if folder.file(gguf_file) is not None else ""
    for name in WEIGHT_FILES:
        if folder.file(name) is not None:
            return name
    return ""


def open_remote(folder: RemoteFolder, target: str) -> Source:
    """Open ``target`` of ``folder`` in place: a ``.gguf`` file, or a safetensors or ``.bin`` file or index
    with the folder's ``config.json``.

    Returns
    -------
    Source
        A :class:`~toolkit.sources.remote.gguf.RemoteGGUFSource`, or a
        :class:`~toolkit.sources.remote.safetensors.RemoteSafetensorsSource` or
        :class:`~toolkit.sources.remote.torch_bin.RemoteTorchBinSource` wrapped to dequantise
        on read when the config has a ``quantization_config`` (:mod:`toolkit.sources.quantized`).

    Raises
    ------
    CheckpointFileError, RemoteReadError, RemoteAccessError, CheckpointChangedError
        As the reads raise them; a ``config.json`` that is no JSON object or declares a bad size.
    UnsupportedQuantizationError
        A ``quantization_config`` that is not read.
    SourceNotFoundError
        A GGUF layout only ``transformers`` reads, or a legacy (pre-zip) ``.bin`` (both need the file on disk).
    """
    if target.endswith(".gguf"):
        from toolkit.sources.remote.gguf import RemoteGGUFSource

        return RemoteGGUFSource(folder, target)
    config_file = folder.file("config.json")
    config = {} if config_file is None else check_config_sizes(
        normalize_config(read_remote_json(config_file, "config.json")), config_file.url)
    if target.endswith((".bin", ".bin.index.json")):
        from toolkit.sources.remote.torch_bin import RemoteTorchBinSource

        src = RemoteTorchBinSource.open(folder, target, config)
    else:
        src = RemoteSafetensorsSource.open(folder, target, config)
    if config_file is None:
        src.missing_config = f"{redact(folder.base) or folder.location}/config.json"
    from toolkit.sources.quantized import quantized_source

    return quantized_source(src)


def open_url(url: str, *, gguf_file: str | None = None) -> Source:
    """Open a checkpoint behind a plain URL: a ``.safetensors`` or ``.gguf`` file, a sharded index, or a
    folder holding one (``gguf_file`` names the GGUF file of a folder).

    Raises
    ------
    SourceNotFoundError
        A URL of another format (download it and pass its path), or a folder
        without ``model.safetensors(.index.json)`` (or ``gguf_file``).
    CheckpointFileError, RemoteReadError, RemoteAccessError, CheckpointChangedError
        As :func:`open_remote`.
    """
    if not is_url(url):
        raise SourceNotFoundError(url, "not an http:// or https:// URL")
    folder, name = url_folder(url)
    target = name or weight_target(folder, gguf_file)
    if not reads_in_place(target):
        what = f"{name!r} is not" if name else \
            "the folder has no model.safetensors(.index.json) (nor the gguf_file= named), or it is not"
        raise SourceNotFoundError(
            url, f"{what} a safetensors or GGUF checkpoint, the formats read in place from a URL. Download the "
            "file (and its config.json) and pass the local path",
        )
    if folder.file(target) is None:
        raise SourceNotFoundError(url, f"the server has no {target!r} (HTTP 404); check the URL")
    return open_remote(folder, target)
