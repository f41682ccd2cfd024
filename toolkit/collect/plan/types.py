"""A plan's records: the stored tensors of a pass and the (layer, component) cells cut from each.

Made by :mod:`toolkit.collect.plan.planner`, kept on disk by
:mod:`toolkit.collect.plan.cache`, read by the measurements and the assembly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from toolkit.architectures.base import Piece
from toolkit.sources.base import Source, TensorRecord


@dataclass(frozen=True)
class PlannedTensor:
    """One stored tensor that holds at least one grid cell.

    Attributes
    ----------
    record : TensorRecord
    pieces : tuple of Piece
        The (layer, component) cells cut from it (three for a fused QKV).
    """

    record: TensorRecord
    pieces: tuple[Piece, ...]


@dataclass
class Plan:
    """The component-bearing tensors of one checkpoint, in file order.

    Attributes
    ----------
    source : Source
        The opened checkpoint, or a :class:`~toolkit.collect.plan.cache.PlannedSource`
        that opens it only when a tensor is read.
    tensors : list of PlannedTensor
        Only tensors that hold at least one component; the others are never read.
    num_layers : int
    adapter : the architecture adapter used (None for a plan read from the cache)
    """

    source: Source
    tensors: list[PlannedTensor]
    num_layers: int
    adapter: object = field(default=None, repr=False)

    @cached_property
    def value_identity(self) -> str:
        """What the numbers of this plan's cells depend on besides the cell itself: the bytes
        (the source fingerprint), the format, the toolkit's reading code and, for GGUF, the
        dequantising libraries."""
        from toolkit.collect.cache import code_identity, digest

        return digest(self.source.fingerprint, self.source.format, dequantizer_versions(self.source.format),
                      code_identity("sources"))

    def attrs(self) -> dict:
        """Dataset attrs describing where the numbers came from."""
        cfg = self.source.config
        dtypes = sorted({t.record.dtype for t in self.tensors})
        from toolkit.sources.quantized import quantization_attrs

        extra = getattr(self.source, "adapter_attrs", None)  # a LoRA adapter: its rank, alpha, base...
        return {
            **quantization_attrs(cfg), **(extra() if callable(extra) else {}),
            "source": self.source.location,
            "format": self.source.format,
            "revision": self.source.revision or "",
            "fingerprint": self.source.fingerprint,
            "model_type": str(cfg.get("model_type", "")),
            "num_hidden_layers": int(self.num_layers),
            "storage_dtype": ",".join(dtypes),
        }


def dequantizer_versions(fmt: str) -> str:
    """Versions of the libraries that turn stored bytes into values for ``fmt`` (GGUF: gguf and
    transformers' tensor processors); ``""`` for formats read bit for bit."""
    if fmt != "gguf":
        return ""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("gguf", "transformers"):
        try:
            found.append(f"{name}={version(name)}")
        except PackageNotFoundError:
            found.append(f"{name}=?")
    return ",".join(found)
