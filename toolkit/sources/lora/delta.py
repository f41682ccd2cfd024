"""One adapted module: its factors, its update ΔW = s · B · A and the merged weight.

Orientation: ``B`` is (out, r) and ``A`` is (r, in), as ``peft`` stores
``lora_B.weight`` / ``lora_A.weight``; B·A is in the ``nn.Linear``
(out, in) orientation. A module whose base weight is stored (in, out)
(GPT-2 ``Conv1D``) gets its ΔW transposed to that storage orientation, as
``peft``'s ``get_delta_weight`` does, so that a record of ΔW has the shape
of the base parameter it updates. Which modules those are is decided per
module type, as ``peft`` decides it (``fan_in_fan_out`` off for an
``nn.Linear``, on for a ``Conv1D``, whatever the config says):
:meth:`toolkit.sources.lora.AdapterSource._stored_transposed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from toolkit.errors import AdapterBaseError, CheckpointFileError
from toolkit.sources.base import TensorRecord


@dataclass(frozen=True)
class Factors:
    """The factors of one module, read: ``b`` (out, r), ``a`` (r, in), float64; ΔW = ``scale`` · b · a
    in (out, in) orientation, stored transposed when ``transposed``."""

    b: torch.Tensor
    a: torch.Tensor
    scale: float
    transposed: bool

    def dense(self) -> torch.Tensor:
        """ΔW in the storage orientation of the base parameter, float32."""
        d = (self.scale * (self.b @ self.a)).to(torch.float32)
        return d.t().contiguous() if self.transposed else d


@dataclass(frozen=True)
class LowRankDelta:
    """How to read one adapted module's update.

    Attributes
    ----------
    module : str
        The module's name in the base model (``model.layers.0.self_attn.q_proj``).
    read_a, read_b : callable
        Read ``lora_A.weight`` (r, in) and ``lora_B.weight`` (out, r) as stored.
    scale : float
        s of ΔW = s · B · A.
    transposed : bool
        The base parameter is stored (in, out).
    read_magnitude : callable or None
        DoRA: reads ``lora_magnitude_vector`` (out,).
    adapter : str
        The adapter folder (for messages).
    """

    module: str
    read_a: Callable[[], torch.Tensor]
    read_b: Callable[[], torch.Tensor]
    scale: float
    transposed: bool
    read_magnitude: Callable[[], torch.Tensor] | None = None
    adapter: str = ""

    def factors(self) -> Factors:
        """The factors in float64 (the ``peft`` product is taken in at least float32; float64 here).

        Raises
        ------
        AdapterBaseError
            A DoRA module: its update depends on the base weights.
        CheckpointFileError
            ``lora_A`` and ``lora_B`` do not share a rank.
        """
        if self.read_magnitude is not None:
            raise AdapterBaseError(
                self.adapter, "", f"{self.module} is a DoRA module (use_dora): its update rescales each row of "
                "base + s*B*A by the stored magnitude, so it cannot be measured without the base weights. "
                "Use toolkit.compare(base, adapter) to measure the merged weights against the base",
            )
        return self._read()

    def _read(self) -> Factors:
        a, b = self.read_a().to(torch.float64), self.read_b().to(torch.float64)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise CheckpointFileError(
                self.adapter, f"{self.module}: lora_A has shape {tuple(a.shape)} and lora_B {tuple(b.shape)}, "
                "not (r, in) and (out, r); re-save the adapter with peft",
            )
        return Factors(b, a, self.scale, self.transposed)

    def merged(self, base: torch.Tensor) -> torch.Tensor:
        """The merged weight ``base + ΔW`` (DoRA: rescaled), in the storage orientation, float32.

        Parameters
        ----------
        base : torch.Tensor
            The base parameter as stored (any float dtype), the shape of ΔW.

        Notes
        -----
        LoRA: W' = W + s·B·A (Hu et al. 2021, eq. 3). DoRA (Liu et al. 2024,
        eq. 5, as ``peft``'s ``DoraLinearVariant.merge_safe``):
        W' = m / ‖W + s·B·A‖_row · (W + s·B·A), the norm of each output row
        in the (out, in) orientation. Computed in float64, returned as float32.
        """
        w = base.to(torch.float64)
        w = w.t() if self.transposed else w
        f = self._read()
        d = f.scale * (f.b @ f.a)
        if tuple(d.shape) != tuple(w.shape):
            raise CheckpointFileError(
                self.adapter, f"{self.module}: the adapter's update has shape {tuple(d.shape)} (out, in) but the "
                f"base weight {tuple(w.shape)}; is this the adapter's base model?",
            )
        merged = w + d
        if self.read_magnitude is not None:
            m = self.read_magnitude().to(torch.float64).reshape(-1)
            merged = (m / torch.linalg.vector_norm(merged, dim=1)).unsqueeze(1) * merged
        merged = merged.to(torch.float32)
        return merged.t().contiguous() if self.transposed else merged


@dataclass(frozen=True)
class DeltaRecord(TensorRecord):
    """A :class:`~toolkit.sources.TensorRecord` of one module's ΔW (named as the base parameter it
    updates); ``read()`` gives the dense ΔW, ``delta.factors()`` its factors."""

    delta: LowRankDelta | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class MergedRecord(TensorRecord):
    """A base parameter with the adapter merged in: ``read()`` reads ``base_record`` (declared by
    :class:`~toolkit.sources.TensorRecord`) and adds ΔW; :meth:`merged_with` adds it to a base tensor
    read already (each base tensor read once)."""

    delta: LowRankDelta | None = field(default=None, repr=False, compare=False)

    def merged_with(self, base: torch.Tensor) -> torch.Tensor:
        """``base`` (this record's base tensor, as stored) with the update merged, float32."""
        return self.delta.merged(base)


def merged_record(base: TensorRecord, delta: LowRankDelta) -> MergedRecord:
    """The record of ``base`` merged with ``delta`` (dtype ``"<base dtype>+lora"``)."""
    return MergedRecord(base.name, tuple(base.shape), f"{base.dtype}+lora", lambda: delta.merged(base.read()),
                        file=base.file, stored_name=base.stored_name, base_record=base, delta=delta)
