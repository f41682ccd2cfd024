"""Attention activations and a multi-head self-attention with a pluggable one.

An attention activation maps the scaled scores ``S = Q Kᵀ / √d_head``
(shape ``(..., N, N)`` for N tokens) to the attention matrix ``A`` that
multiplies the values: ``out = A V``.

- ``softmax``: ``A_ij = exp(S_ij) / Σ_k exp(S_ik)``. Every row is a
  probability vector, so ``‖A_i·‖₂ ≤ ‖A_i·‖₁ = 1`` and
  ``‖A‖_F ≤ √N`` whatever the scores (Saratchandran et al., Thm. 4.1).
- ``polynomial(p, c)``: ``A_ij = S_ij^p / c``, elementwise, with no
  normalisation. ``‖A‖_F = ‖S^{∘p}‖_F / c`` has no bound of its own: it
  grows with the scores. With entries of order one, ``‖S^{∘p}‖_F ~ N``, so
  ``c = √N`` (``c="sqrt_n"``) brings it back to the ``O(√N)`` of softmax,
  the scaling the paper proposes.

References
----------
H. Saratchandran, J. Zheng, Y. Ji, W. Zhang, S. Lucey, "Rethinking Softmax:
Self-Attention with Polynomial Activations", arXiv:2410.18613 (2024),
Theorem 4.1 and Section 5.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from toolkit.constraint_types import Exempt, Instance
from toolkit.constraints import checks_options
from toolkit.errors import UnknownActivationError

REFERENCE = (
    "Saratchandran et al., Rethinking Softmax: Self-Attention with Polynomial "
    "Activations, arXiv:2410.18613 (2024), Thm. 4.1"
)
_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
_UNSUP = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")


def _fmt_c(c: float | str) -> str:
    if c == "sqrt_n":
        return "√N"
    return str(int(c)) if float(c).is_integer() else f"{float(c):g}"


@dataclass(frozen=True)
class AttentionActivation:
    """One attention activation: softmax, or ``x^p / c`` elementwise.

    Attributes
    ----------
    kind : {"softmax", "polynomial"}
    p : int
        Power of the polynomial (ignored for softmax). Default 1.
    c : float or "sqrt_n"
        Divisor of the polynomial; ``"sqrt_n"`` divides by √N, N the number
        of tokens (keys). Default 1.

    Examples
    --------
    >>> parse_activation("x³/16").label, parse_activation("x^3/16").name
    ('x³/16', 'x^3/16')
    """

    kind: str = "softmax"
    p: int = 1
    c: float | str = 1.0

    def __post_init__(self):
        if self.kind not in ("softmax", "polynomial"):
            raise UnknownActivationError(str(self.kind))
        if self.kind == "polynomial":
            if int(self.p) != self.p or self.p < 1:
                raise UnknownActivationError(f"x^{self.p}/{self.c}")
            if self.c != "sqrt_n" and not (isinstance(self.c, (int, float)) and self.c > 0):
                raise UnknownActivationError(f"x^{self.p}/{self.c}")

    @property
    def label(self) -> str:
        """Display label with superscripts: ``softmax``, ``x/1``, ``x³/16``, ``x²/√N``."""
        if self.kind == "softmax":
            return "softmax"
        power = "" if self.p == 1 else str(self.p).translate(_SUP)
        return f"x{power}/{_fmt_c(self.c)}"

    @property
    def name(self) -> str:
        """ASCII name: ``softmax``, ``x/1``, ``x^3/16``, ``x^2/sqrt_n``."""
        if self.kind == "softmax":
            return "softmax"
        power = "" if self.p == 1 else f"^{self.p}"
        c = "sqrt_n" if self.c == "sqrt_n" else _fmt_c(self.c)
        return f"x{power}/{c}"

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention matrix from scaled scores.

        Parameters
        ----------
        scores : torch.Tensor, shape (..., N, N)
            ``Q Kᵀ / √d_head``; the last axis runs over keys.

        Returns
        -------
        torch.Tensor, shape (..., N, N)
            ``softmax(scores, -1)`` or ``scores**p / c``.
        """
        if self.kind == "softmax":
            return torch.softmax(scores, dim=-1)
        c = math.sqrt(scores.shape[-1]) if self.c == "sqrt_n" else float(self.c)
        out = scores
        for _ in range(int(self.p) - 1):  # repeated products: exact, cheap backward
            out = out * scores
        return out / c


_POLY = re.compile(
    r"^x(?:\^?(?P<p>\d+))?(?:/(?P<c>sqrt_?n|√n|\d+(?:\.\d*)?(?:e[+-]?\d+)?))?$"
)


@checks_options(spec=Exempt("the activation's text or record: UnknownActivationError says what it cannot read"))
def parse_activation(spec: str | AttentionActivation) -> AttentionActivation:
    """Read an activation from text.

    Parameters
    ----------
    spec : str or AttentionActivation
        ``"softmax"``; or ``x^p/c`` written ``"x/16"``, ``"x^3/16"``,
        ``"x³/16"``, ``"x**2/4"``, ``"x^3/sqrt_n"``, ``"x³/√N"``; ``/c`` may
        be left out (c = 1). Spaces and case are ignored.

    Returns
    -------
    AttentionActivation

    Raises
    ------
    UnknownActivationError
        Text that is neither softmax nor such a polynomial.
    """
    if isinstance(spec, AttentionActivation):
        return spec
    text = str(spec).strip().replace(" ", "").replace("**", "^").translate(_UNSUP)
    text = re.sub(r"x(\d)", r"x^\1", text.lower())
    if text == "softmax":
        return AttentionActivation("softmax")
    m = _POLY.match(text)
    if not m:
        raise UnknownActivationError(str(spec))
    p = int(m.group("p") or 1)
    c_text = m.group("c") or "1"
    c: float | str = "sqrt_n" if "n" in c_text else float(c_text)
    if p < 1 or (c != "sqrt_n" and c <= 0):
        raise UnknownActivationError(str(spec))
    return AttentionActivation("polynomial", p, c)


@checks_options(attention=Instance("torch.Tensor", "a torch.Tensor of attention weights (..., N, N)"))
def frobenius_norm(attention: torch.Tensor) -> torch.Tensor:
    """Frobenius norm over the last two axes.

    Parameters
    ----------
    attention : torch.Tensor, shape (..., N, N)

    Returns
    -------
    torch.Tensor, shape (...)
        ``‖A‖_F = (Σ_ij A_ij²)^½``, computed in float64.
    """
    return attention.double().pow(2).sum(dim=(-2, -1)).sqrt()


#: Names of :func:`score_statistics`' numbers, in order (the lab Dataset's variables).
SCORE_STATISTICS = ("score_mean_abs", "score_p99_abs", "score_fraction_above_1")


def score_statistics(scores: torch.Tensor) -> tuple[float, float, float]:
    """The scale of the scaled scores ``S = Q Kᵀ / √d_head``, pooled over every entry.

    What decides where a polynomial's attention norm lands: ``x³`` shrinks
    entries with ``|S| < 1`` and magnifies those above, so ``x³/1`` runs above
    ``x/1`` only where enough of ``|S|`` exceeds 1.

    Parameters
    ----------
    scores : torch.Tensor, shape (...)
        Scores of one layer, e.g. (batch, head, N, N); every entry counts once.

    Returns
    -------
    (float, float, float)
        ``mean |S|``, the 99th percentile of ``|S|`` (linear interpolation
        between order statistics, NumPy's default) and the share of entries
        with ``|S| > 1``.

    Raises
    ------
    EmptyInputError
        No entry.

    Examples
    --------
    >>> mean, p99, above = score_statistics(torch.tensor([0.5, -2.0, 1.0, 0.0]))
    >>> mean, round(p99, 12), above  # p99 = 1 + 0.97 * (2 - 1)
    (0.875, 1.97, 0.25)
    """
    import numpy as np

    if scores.numel() == 0:
        from toolkit.errors import EmptyInputError

        raise EmptyInputError("no score to summarise")
    a = scores.detach().abs().reshape(-1).float().numpy()  # float32 holds |S| exactly as computed
    # numpy.quantile's "linear" rule from two order statistics: np.partition is O(n), a sort
    # of the 4.3 M entries of an N = 65 layer costs ~7x more (0.6 s vs 0.09 s here).
    h = (a.size - 1) * 0.99
    lo = int(math.floor(h))
    hi = min(lo + 1, a.size - 1)
    part = np.partition(a, [lo, hi]) if a.size > 1 else a
    below, above = float(part[lo]), float(part[hi])
    p99 = below + (h - lo) * (above - below)
    return float(a.mean(dtype=np.float64)), p99, float(np.count_nonzero(a > 1.0) / a.size)


class Attention(nn.Module):
    """Multi-head self-attention with a pluggable activation.

    ``out = W_o concat_h(φ(Q_h K_hᵀ / √d_head) V_h)`` with φ an
    :class:`AttentionActivation`.

    Parameters
    ----------
    dim : int
        Width of the token embeddings (d_model).
    heads : int
        Number of heads; ``dim`` must be divisible by it.
    activation : str or AttentionActivation
        See :func:`parse_activation`. Default ``"softmax"``.

    Attributes
    ----------
    record : bool
        When True, the last forward pass keeps the post-activation attention
        matrix in ``last_attention`` and the scaled scores in ``last_scores``
        (both shape (batch, head, N, N), detached).
    """

    def __init__(self, dim: int, heads: int, activation: str | AttentionActivation = "softmax"):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.activation = parse_activation(activation)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.record = False
        self.last_attention: torch.Tensor | None = None
        self.last_scores: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend. ``x``: shape (batch, N, dim); returns the same shape."""
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        attn = self.activation(scores)
        if self.record:
            self.last_attention, self.last_scores = attn.detach(), scores.detach()
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
