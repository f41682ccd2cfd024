"""The unit of ``weight_stats`` on a LoRA adapter: one module's ΔW = s · B · A, measured from its factors.

The spectrum of ΔW comes from the r × r core, never from an SVD of the
m × n product: with thin QR factorisations B = Q_B R_B and Aᵀ = Q_A R_A,
B·A = Q_B (R_B R_Aᵀ) Q_Aᵀ, and Q_B, Q_A have orthonormal columns, so the
non-zero singular values of s·B·A are |s| times those of the r × r core
R_B R_Aᵀ (Golub & Van Loan 2013, §2.5 and §5.2); the other min(m, n) − r
are exactly 0. Every spectral metric (spectral norm, stable rank,
effective rank, matrix rank ≤ r, condition number, the ESD columns) reads
these singular values, so ranks are exact. The entry-wise metrics
(``frobenius_norm``, ``rms``, ``kurtosis``, ``max_abs_over_rms``) read the
m × n product, formed once per cell (m·n·r multiply-adds, cheap next to an
m × n SVD).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from toolkit.architectures.base import Extract
from toolkit.collect.cells import Cell
from toolkit.collect.measure.weights import WeightMeasurement
from toolkit.collect.measure.work import TensorWork
from toolkit.sources.lora.delta import Factors


def core_singular_values(b: torch.Tensor, a: torch.Tensor, scale: float) -> torch.Tensor | None:
    """Singular values of ``scale · b @ a`` from the r × r core, descending, float64, length min(m, n);
    None when a factor holds NaN/Inf (the cell is then NaN with the reason a dense matrix gets).

    Parameters
    ----------
    b : torch.Tensor, shape (m, r)
    a : torch.Tensor, shape (r, n)
    scale : float

    Returns
    -------
    torch.Tensor, shape (min(m, n),), float64, or None
        The non-zero ones from the core, then exact zeros.
    """
    b, a = b.to(torch.float64), a.to(torch.float64)
    if not (bool(torch.isfinite(b).all()) and bool(torch.isfinite(a).all())):
        return None
    m, n = b.shape[0], a.shape[1]
    _, rb = torch.linalg.qr(b)
    _, ra = torch.linalg.qr(a.t())
    s = torch.linalg.svdvals(rb @ ra.t()) * abs(float(scale))
    out = torch.zeros(min(m, n), dtype=torch.float64)
    k = min(len(s), len(out))
    out[:k] = s[:k]
    return out


def cut(f: Factors, extract) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(b, a)`` of the component ``extract`` cuts from the stored ΔW, (out, in) orientation; None when
    ``extract`` is not an :class:`~toolkit.architectures.base.Extract` (a custom callable: measured dense).

    Raises
    ------
    MappingError
        As ``extract`` would on the dense tensor (row count differs from the config's fused size).
    """
    if not isinstance(extract, Extract):
        return None
    b, a = f.b, f.a
    if extract.transpose != f.transposed:  # the stored tensor read the other way round: (sBA)ᵀ = s Aᵀ Bᵀ
        b, a = a.t(), b.t()
    if extract.rows is not None and b.shape[0] != extract.rows:
        extract(torch.empty((b.shape[0], a.shape[1]), device="meta"))  # raises the adapter's own MappingError
    if extract.index is not None:
        b = b[extract.index]
    return b, a


@dataclass(frozen=True)
class LowRankMeasurement(WeightMeasurement):
    """:class:`~toolkit.collect.measure.weights.WeightMeasurement` of ΔW records read as factors."""

    @property
    def float32(self) -> bool:
        return False  # the reader hands over Factors, converted per cell

    @classmethod
    def of(cls, m: WeightMeasurement) -> LowRankMeasurement:
        return cls(**{f: getattr(m, f) for f in m.__dataclass_fields__})

    def reader(self, work: TensorWork):
        """Reads the module's factors (``DeltaRecord.delta.factors``)."""
        return work.records[0].delta.factors

    def read_bytes(self, work: TensorWork) -> int:
        """0: the factors are small next to the product they stand for (read ahead always)."""
        return 0

    def measure(self, work: TensorWork, f: Factors, memo: dict) -> list[Cell | None]:
        """Fresh cells: spectra from the core, entry-wise metrics (and head slices) from the product."""
        out = []
        for c in work.cells:
            if not c.work_left:
                out.append(None)
                continue
            ba = cut(f, c.piece.extract)
            if ba is None:
                out.append(self.measure_cell(c, c.piece.extract(f.dense())))
                continue
            w = (f.scale * (ba[0] @ ba[1])).to(torch.float32)
            out.append(self.measure_cell(c, w, core_singular_values(ba[0], ba[1], f.scale)))
        return out


def measurement_for(source, measurement: WeightMeasurement) -> WeightMeasurement:
    """``measurement`` for ``source``: a :class:`LowRankMeasurement` when the source is measured as factors.

    Raises
    ------
    AdapterBaseError
        Records that cannot be measured without their base (a DoRA adapter), before any work.
    """
    if not source.measured_as_factors:
        return measurement
    source.check_standalone()
    return LowRankMeasurement.of(measurement)
