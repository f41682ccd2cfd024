r"""The spectrum of each attention head: ``alpha``, ``stable_rank``, ``spectral_norm`` per head slice.

An attention projection in the ``nn.Linear`` orientation (out, in) holds its
heads as blocks of ``head_dim`` rows (q, k, v: head ``h`` is rows
:math:`h d .. (h+1) d - 1`) or columns (o: head ``h``'s output is read by
columns :math:`h d .. (h+1) d - 1`). With grouped-query attention (GQA) k and
v have ``num_key_value_heads`` heads, fewer than q's ``num_attention_heads``;
query head ``h`` reads key/value head :math:`\lfloor h / (H / H_{kv}) \rfloor`
(``transformers``' ``repeat_kv``).

For each slice :math:`W_h` (float32, its own singular values, computed once
and shared by the three statistics):

- ``alpha``: the power-law exponent of the ESD of :math:`W_h^\top W_h`
  (:func:`toolkit.metrics.powerlaw.fit_power_law`, with the fit options of
  the run), NaN with the reason where it is undefined (a head of fewer than 8
  eigenvalues above 1e-5);
- ``stable_rank``: :math:`\|W_h\|_F^2 / \sigma_{max}(W_h)^2`;
- ``spectral_norm``: :math:`\sigma_{max}(W_h)`.

Pure functions on tensors; :mod:`toolkit.collect.head_stats` drives them over
a checkpoint.

References
----------
Martin, C. H. & Mahoney, M. W. (2021). *JMLR* 22(165) (alpha).
Rudelson, M. & Vershynin, R. (2007). *J. ACM* 54(4):21 (stable rank).
Ainslie, J. et al. (2023). GQA: training generalized multi-query transformer
models from multi-head checkpoints. EMNLP 2023.
"""

from __future__ import annotations

import math

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


def slice_stats(w_h: torch.Tensor, *, device: str = "cpu", **fit_options) -> dict[str, tuple[float, str]]:
    """``{stat: (value, reason)}`` of one head slice (:data:`HEAD_STATS`), from one set of singular values."""
    from toolkit.metrics.powerlaw import fit_power_law
    from toolkit.metrics.spectral import singular_values

    try:
        s = singular_values(w_h, device=device).numpy()
    except DegenerateMatrix as e:
        return {name: (math.nan, e.reason) for name in HEAD_STATS}
    top = float(s[0]) if s.size else 0.0
    if not top > 0.0:
        return {name: (math.nan, "all-zero slice") for name in HEAD_STATS}
    out = {"stable_rank": (float((s * s).sum()) / (top * top), ""), "spectral_norm": (top, "")}
    try:
        out["alpha"] = (float(fit_power_law(s * s, **fit_options).alpha), "")
    except DegenerateMatrix as e:
        out["alpha"] = (math.nan, e.reason)
    return {name: out[name] for name in HEAD_STATS}


def head_stats(w: torch.Tensor, component: str, heads: int, head_dim: int, *, device: str = "cpu",
               **fit_options) -> list[dict[str, tuple[float, str]]]:
    r"""Per-head statistics of one attention matrix.

    Parameters
    ----------
    w : torch.Tensor, shape (out_features, in_features)
        Any float dtype (converted to float32).
    component : {"attn.q", "attn.k", "attn.v", "attn.o"}
    heads : int
        Heads of this component (:func:`head_count`).
    head_dim : int
    device : str
        Where the singular values are computed.
    **fit_options
        Options of :func:`toolkit.metrics.powerlaw.fit_power_law` (``fix_fingers``, ``xmax``...).

    Returns
    -------
    list of dict
        One ``{stat: (value, reason)}`` per head, in head order.

    Raises
    ------
    DegenerateMatrix
        As :func:`head_slices`.
    """
    w = w.to(torch.float32)
    return [slice_stats(part, device=device, **fit_options) for part in head_slices(w, component, heads, head_dim)]
