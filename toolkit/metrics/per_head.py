r"""The spectrum of each attention head: ``alpha``, ``stable_rank``, ``spectral_norm`` per head slice.

An attention projection in the ``nn.Linear`` orientation (out, in) holds its
heads as blocks of ``head_dim`` rows (q, k, v: head ``h`` is rows
:math:`h d .. (h+1) d - 1`) or columns (o: head ``h``'s output is read by
columns :math:`h d .. (h+1) d - 1`). With grouped-query attention (GQA) k and
v have ``num_key_value_heads`` heads, fewer than q's ``num_attention_heads``;
query head ``h`` reads key/value head :math:`\lfloor h / (H / H_{kv}) \rfloor`
(``transformers``' ``repeat_kv``).

Each slice :math:`W_h` is a matrix of its own, measured by the one evaluator
(:func:`toolkit.metrics.evaluate.evaluate_matrix`) with the registered
metrics named in :data:`HEAD_STATS` (its own singular values, computed once
and shared by the three):

- ``alpha``: the power-law exponent of the ESD of :math:`W_h^\top W_h`
  (the ``alpha`` column's fit, with the fit options of the run), NaN with the
  reason where it is undefined (a head of fewer than 8 eigenvalues above 1e-5);
- ``stable_rank``: :math:`\|W_h\|_F^2 / \sigma_{max}(W_h)^2`;
- ``spectral_norm``: :math:`\sigma_{max}(W_h)`.

This module says how a matrix splits into heads and names the statistics;
:mod:`toolkit.collect.measure.heads` measures them in the weight pass.

References
----------
Martin, C. H. & Mahoney, M. W. (2021). *JMLR* 22(165) (alpha).
Rudelson, M. & Vershynin, R. (2007). *J. ACM* 54(4):21 (stable rank).
Ainslie, J. et al. (2023). GQA: training generalized multi-query transformer
models from multi-head checkpoints. EMNLP 2023.
"""

from __future__ import annotations

import torch

from toolkit.metrics.registry import DegenerateMatrix

#: Statistics of each head slice, in order.
HEAD_STATS = ("alpha", "stable_rank", "spectral_norm")
#: Components split per query head (``head``) and per key/value head (``kv_head``).
Q_HEAD_COMPONENTS = ("attn.q", "attn.o")
KV_HEAD_COMPONENTS = ("attn.k", "attn.v")

HEAD_ATTRS = {
    "alpha": dict(long_name="power-law exponent alpha of each head's slice", units="1",
                  description="alpha of the eigenvalues of W_h^T W_h, W_h the head's rows (q, k, v) or columns (o); "
                              "the fit of the alpha column, with the run's fit options",
                  reference="Martin & Mahoney (2021) JMLR 22(165)"),
    "stable_rank": dict(long_name="stable rank of each head's slice", units="1",
                        description="||W_h||_F^2 / sigma_max(W_h)^2, W_h the head's rows (q, k, v) or columns (o)",
                        reference="Rudelson & Vershynin (2007) J. ACM 54(4):21"),
    "spectral_norm": dict(long_name="largest singular value of each head's slice", units="1",
                          description="sigma_max(W_h), W_h the head's rows (q, k, v) or columns (o)",
                          reference="Golub & Van Loan, Matrix Computations (2013), sec. 2.3"),
}


def head_count(component: str, num_heads: int, num_kv_heads: int) -> int:
    """Heads of ``component``: ``num_heads`` for q/o, ``num_kv_heads`` for k/v, 0 otherwise."""
    if component in Q_HEAD_COMPONENTS:
        return int(num_heads)
    if component in KV_HEAD_COMPONENTS:
        return int(num_kv_heads)
    return 0


def head_slices(w: torch.Tensor, component: str, heads: int, head_dim: int) -> list[torch.Tensor]:
    """The ``heads`` slices of ``w`` (out, in): row blocks for q/k/v, column blocks for o.

    Raises
    ------
    DegenerateMatrix
        The split side is not ``heads * head_dim`` long (the config's sizes do not fit the matrix).
    """
    axis = 1 if component == "attn.o" else 0
    if heads < 1 or w.shape[axis] != heads * head_dim:
        side = "columns" if axis else "rows"
        raise DegenerateMatrix(f"{component} has {w.shape[axis]} {side}, not {heads} heads x head_dim {head_dim}")
    return list(torch.split(w, head_dim, dim=axis))
