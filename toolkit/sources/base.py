"""The contract every weight source keeps.

A source finds a checkpoint's tensors and yields them one at a time as
:class:`TensorRecord` objects whose bytes are read only when ``read()`` is
called, so peak memory stays near the largest tensor, never the model.

Everything a caller may ask of a source is declared on :class:`Source`, with a
default that holds for a plain checkpoint: the callers never probe for
optional attributes. A format overrides what differs (a LoRA adapter is
``measured_as_factors`` and does not cover every layer; a GGUF file lists the
tensors ``transformers`` leaves out in ``dropped``...).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TensorRecord:
    """One stored tensor, named as ``transformers`` names the parameter.

    Attributes
    ----------
    name : str
        Parameter name exactly as ``transformers`` names it after loading
        (``model.layers.0.self_attn.q_proj.weight``), also for GGUF files.
    shape : tuple of int
        Shape of the tensor ``read()`` returns (for matrices (out, in) in the
        ``transformers`` parameter's own orientation; GPT-2 Conv1D stays (in, out)
        here and is transposed by the architecture adapter).
    dtype : str
        Storage dtype as written in the file: ``"bfloat16"``, ``"float16"``,
        ``"float32"``, or a GGUF quantisation name (``"Q4_1"``, ``"Q4_K"``...).
    file : str
        The weight file the bytes come from (``""`` when unknown).
    stored_name : str
        The tensor's name inside that file when it differs from ``name``
        (GGUF ``blk.0.attn_q.weight``, a legacy ``LayerNorm.gamma``), else ``""``.
    base_record : TensorRecord or None
        For a record whose values are a base tensor with an update merged in
        (:class:`toolkit.sources.lora.MergedRecord`): the record of that base
        tensor, read once and shared. None (the default) for a stored tensor.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    _reader: Callable[[], torch.Tensor] = field(repr=False, compare=False)
    file: str = field(default="", compare=False)
    stored_name: str = field(default="", compare=False)
    _row_reader: Callable[[int, int], torch.Tensor] | None = field(default=None, repr=False, compare=False)
    base_record: TensorRecord | None = field(default=None, repr=False, compare=False)

    @property
    def can_read_rows(self) -> bool:
        """Whether the format reads a block of rows (first index) without the rest of the tensor
        (:meth:`row_blocks` streams, an expert of a stack is read alone); safetensors, and
        quantised stacks of such parts, can."""
        return self._row_reader is not None

    @property
    def read_nbytes(self) -> int:
        """Bytes of the tensor :meth:`read` returns: its entries times the storage dtype's size, or float32's
        for a dtype torch lacks (quantised GGUF, dequantised to float32)."""
        dtype = getattr(torch, self.dtype, None)
        size = dtype.itemsize if isinstance(dtype, torch.dtype) else 4
        return math.prod(self.shape) * size

    def read(self) -> torch.Tensor:
        """Read the tensor now.

        Returns a CPU tensor in the storage dtype when torch has it
        (bf16 stays bf16, so diffs can be judged bit for bit); quantised GGUF
        tensors are dequantised to float32. Values and row order equal what
        ``transformers`` loads from the same file.

        Raises
        ------
        UnsupportedDtypeError
            The tensor holds complex numbers: every statistic here is of
            real matrices, and a cast to float would drop the imaginary part.
        CheckpointFileError
            The file cannot be read.
        """
        return self._checked(self._reader())

    def _checked(self, tensor: torch.Tensor) -> torch.Tensor:
        if isinstance(tensor, torch.Tensor) and tensor.is_complex():
            from toolkit.errors import UnsupportedDtypeError

            raise UnsupportedDtypeError(
                self.file or "?", self.stored_name or self.name, str(tensor.dtype).removeprefix("torch."),
                "complex weights are not measured (casting them to float would silently drop the imaginary "
                "part); measure torch.view_as_real(tensor) or its real and imaginary parts yourself, or leave "
                "this tensor out of the checkpoint",
            )
        return tensor

    def row_blocks(self, max_entries: int = 1 << 24) -> Iterator[torch.Tensor]:
        """Read the tensor in consecutive blocks of rows (first dimension), each
        at most ``max_entries`` entries (at least one row), as ``read()`` would
        return them; the whole tensor at once when it is that small or the
        format cannot read part of a tensor (only safetensors can).

        Used for tensors that are only summed (embeddings in ``compare``), so
        that a 150k-row embedding never sits in memory whole.

        Yields
        ------
        torch.Tensor
            Shape ``(rows_in_block, *shape[1:])``, storage dtype; concatenated
            along dim 0 they equal ``read()``.

        Raises
        ------
        CheckpointFileError
            The file cannot be read (as ``read()``).
        """
        rows = self.shape[0] if self.shape else 1
        size = 1
        for d in self.shape:
            size *= d
        if not self.can_read_rows or size <= max_entries or rows <= 1:
            yield self.read()
            return
        step = max(1, max_entries // max(1, size // rows))
        for start in range(0, rows, step):
            yield self._checked(self._row_reader(start, min(rows, start + step)))


class Source:
    """A checkpoint opened for streaming, and everything its callers may ask of it.

    Attributes
    ----------
    location : str
        What the user passed (hub id, directory, or file), normalised.
    format : str
        The name of its format in the registry (:mod:`toolkit.sources.formats`):
        ``"safetensors"``, ``"pytorch"``, ``"gguf"``, ``"lora"``...
    config : dict
        The ``transformers`` config as a dict (``model_type``,
        ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
        ``hidden_size``, ``intermediate_size``, ``head_dim`` when known...).
    fingerprint : str
        A string that changes when any weight file changes (size, mtime, or
        content hash where the format gives one).
    revision : str
        Hub revision or commit where known, else ``""``.
    missing_config : str
        The ``config.json`` path looked for next to the weights and not found
        (``config`` is then ``{}``: no family, no sizes), else ``""``.
    checks_identity_on_read : bool
        True for a source that checks its files' identity itself when it first
        reads (a cached plan's source); the planner then does not re-check them
        up front. Default False.
    dropped : sequence of str
        Stored tensors the format's loader leaves out, which get no record
        (GGUF: tensors ``transformers`` maps to no parameter, such as
        ``rope_freqs.weight``). Default empty.
    covers_every_layer : bool
        Whether the records cover every layer of the model the config
        describes (False for a LoRA adapter, which may adapt only some);
        the planner checks the layer count only when True. Default True.
    measured_as_factors : bool
        The records are low-rank updates ΔW = s·B·A of a base model, and
        ``record.delta.factors()`` gives B, A and the scale s
        (:class:`toolkit.sources.lora.Factors`): their statistics are computed
        from the factors, never from a dense ΔW (a LoRA adapter). Default False.
    """

    location: str
    format: str
    config: dict
    fingerprint: str
    revision: str = ""
    missing_config: str = ""
    checks_identity_on_read: bool = False
    dropped: Sequence[str] = ()
    covers_every_layer: bool = True
    measured_as_factors: bool = False

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield every stored tensor's record, reading no tensor data."""
        raise NotImplementedError

    def files(self) -> list[str]:
        """The weight files this source reads."""
        raise NotImplementedError

    def check_standalone(self) -> None:
        """Raise when the records cannot be measured without their base model; do nothing otherwise.

        Called before any work by whoever measures the records on their own
        (``weight_stats``). Nothing to check for a full checkpoint.

        Raises
        ------
        AdapterBaseError
            A DoRA adapter: its update rescales each row of base + s·B·A by a
            stored magnitude, so it depends on the base weights.
        """

    def merged_into(self, base: Source) -> Source:
        """``base`` with this update merged in: its adapted parameters read as base + ΔW.

        Parameters
        ----------
        base : Source
            The base model this source updates.

        Returns
        -------
        Source
            Records named as ``base``'s; each merged one has its ``base_record``.

        Raises
        ------
        NotAnUpdateError
            This source is a full checkpoint, no update of a base (the default).
        """
        from toolkit.errors import NotAnUpdateError

        raise NotAnUpdateError(
            self.location, self.format, "only an update (a LoRA adapter folder) can be merged into a base model; "
            f"compare the two checkpoints instead: toolkit.compare({base.location!r}, {self.location!r})",
        )

    def extra_attrs(self) -> dict:
        """The Dataset attrs this source adds to the standard ones (NetCDF-safe: str and numbers).

        The default describes a quantised checkpoint from its config
        (``{"quantization": "fp8 e4m3, 128x128 blocks"}``,
        :func:`toolkit.sources.quantized.quantization_attrs`), so a source known
        only from its config gives the same attrs; ``{}`` for an unquantised one.
        """
        from toolkit.sources.quantized.methods import quantization_attrs

        return quantization_attrs(self.config)

    def decoder_versions(self) -> str:
        """Versions of the libraries that turn this source's bytes into values (part of a cache key).

        ``""`` for formats read bit for bit (safetensors, ``.bin``); for GGUF
        ``"gguf=<version>,transformers=<version>"`` (``gguf.dequantize`` and
        ``transformers``' tensor processors). The default asks the registered
        format of :attr:`format` (:meth:`toolkit.sources.formats.CheckpointFormat.decoder_versions`),
        so a source known only from its format name gives the same answer.
        """
        from toolkit.sources.formats import list_formats

        fmt = list_formats().get(self.format)
        return fmt.decoder_versions() if fmt is not None else ""

    def check_unchanged(self) -> None:
        """Raise when the weight files no longer have the identity this source was opened with.

        Called after reading (before a result is stored) as well as before
        planning, so that bytes of a file rewritten meanwhile are never
        measured, mixed with the old ones or cached under the old identity.
        The default compares :func:`~toolkit.sources.identity.files_identity`
        of :meth:`files` with :attr:`fingerprint`.

        Raises
        ------
        CheckpointChangedError
            A file was replaced, rewritten, touched or removed.
        """
        files = self.files()
        if not files or not self.fingerprint:
            return
        from toolkit.errors import CheckpointChangedError
        from toolkit.sources.identity import files_identity

        try:
            now = files_identity(files)
        except OSError as exc:
            raise CheckpointChangedError(self.location, self.fingerprint, f"unreadable ({exc})") from exc
        if now != self.fingerprint:
            raise CheckpointChangedError(self.location, self.fingerprint, now)

    def reopen_location(self) -> str:
        """What ``open_source`` opens again in another process (a Dask worker): :attr:`location`, except for a
        URL read in place, whose ``location`` is shown with its secrets masked while this keeps them."""
        return self.location

    def reopen_kwargs(self) -> dict:
        """The keywords ``open_source(self.location, **kwargs)`` needs to open the same checkpoint
        again in another process (a Dask worker).

        The default: the commit of a hub checkpoint (``{"revision": ...}``;
        ``location`` is then a hub id, not a path), else ``{}``. A GGUF source
        adds its file (``{"gguf_file": ...}``).
        """
        return {"revision": self.revision} if self.revision and not os.path.isabs(self.location) else {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.format} {self.location!r}>"
