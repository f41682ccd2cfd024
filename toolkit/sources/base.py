"""The contract every weight source keeps.

A source finds a checkpoint's tensors and yields them one at a time as
:class:`TensorRecord` objects whose bytes are read only when ``read()`` is
called, so peak memory stays near the largest tensor, never the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    _reader: Callable[[], torch.Tensor] = field(repr=False, compare=False)
    file: str = field(default="", compare=False)
    stored_name: str = field(default="", compare=False)
    _row_reader: Callable[[int, int], torch.Tensor] | None = field(default=None, repr=False, compare=False)

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
        if self._row_reader is None or size <= max_entries or rows <= 1:
            yield self.read()
            return
        step = max(1, max_entries // max(1, size // rows))
        for start in range(0, rows, step):
            yield self._checked(self._row_reader(start, min(rows, start + step)))


class Source:
    """A checkpoint opened for streaming.

    Attributes
    ----------
    location : str
        What the user passed (hub id, directory, or file), normalised.
    format : str
        ``"safetensors"``, ``"pytorch"`` or ``"gguf"``.
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
    """

    location: str
    format: str
    config: dict
    fingerprint: str
    revision: str = ""
    missing_config: str = ""
    #: True for a source that checks its files' identity itself when it first reads
    #: (a cached plan's source); the planner then does not re-check them up front.
    checks_identity_on_read: bool = False
    #: TEMPORARY (replaced by the declared contract of the rooms branch)
    measured_as_factors: bool = False

    def check_standalone(self) -> None:
        """TEMPORARY."""

    def tensors(self) -> Iterator[TensorRecord]:
        """Yield every stored tensor's record, reading no tensor data."""
        raise NotImplementedError

    def files(self) -> list[str]:
        """The weight files this source reads."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.format} {self.location!r}>"
