r"""Diff metrics: how a fine-tune changed one weight matrix.

A diff metric is a pure function ``func(base, target, ctx, **options) -> float``:

- ``base``, ``target``: torch tensors, shape (out_features, in_features),
  float32, the two sides' values as stored (bf16 and fp16 convert exactly;
  quantised GGUF is already dequantised).
- ``ctx``: the :class:`DiffContext` of the pair. It computes the shared
  quantities once, on first use, so every metric reads the same
  :math:`\Delta W`, the same singular values of :math:`\Delta W` and the
  same singular subspaces.
- ``options``: the metric's registered options (``tolerance``, ``k``),
  overridable by the caller (part of the cache key).

Where a value is undefined (a zero base matrix, an unchanged matrix for the
rank of :math:`\Delta W`) the function raises
:class:`~toolkit.metrics.registry.DegenerateMatrix`; the caller records NaN
and the reason.

"Unchanged" (update sparsity)
-----------------------------
An entry is unchanged when its stored value is the same on both sides,
compared bit for bit in the *comparison dtype*: the storage dtype when both
sides share it (two bf16 checkpoints: the bf16 bits), else the coarser of
the two as read (fewer mantissa bits: bfloat16 < float16 < float32 <
float64), both sides rounded to it. A dequantised GGUF base (read as
float32) against a bf16 fine-tune is judged in bf16: an entry counts as
unchanged when the fine-tune stores the bf16 rounding of the base's value,
since no smaller change could have been stored. With ``tolerance > 0`` an
entry is unchanged when :math:`|t - b| \le` ``tolerance`` (absolute, in the
weights' units) after that rounding. The continuous metrics (relative change,
cosine, ranks, subspaces) use the values as read, unrounded.
"""

from __future__ import annotations

import math

import torch

from toolkit.cached import cached_property
from toolkit.metrics.gram import gram_scale
from toolkit.metrics.pair_sums import PairSums, pair_sums
from toolkit.metrics.registry import DegenerateMatrix, MetricValue, register_metric, resolve_metrics
from toolkit.metrics.subspace import TopSubspace, exact_top_left, top_subspace


def count_unchanged(base: torch.Tensor, target: torch.Tensor, tolerance: float = 0.0) -> int:
    """Number of entries whose stored value did not change (see module docstring).

    Parameters
    ----------
    base, target : torch.Tensor
        Same shape, in their storage dtypes (bf16 as bf16).
    tolerance : float, default 0.0
        Absolute tolerance; 0 compares the bits in the comparison dtype.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        A dtype other than bfloat16, float16, float32 or float64.
    """
    return pair_sums(base, target, tolerance).unchanged


#: The exact route of the top-k left singular subspace (float64 Gram, top k + 1 eigenpairs), kept under its old
#: name.
top_left_singular_vectors = exact_top_left


class DiffContext:
    r"""Quantities shared by the diff metrics of one (base, target) pair.

    Everything is computed on first use and kept: the entry-wise sums in one
    chunked pass over the stored values (:func:`toolkit.metrics.pair_sums.pair_sums`);
    on the CPU the singular values of :math:`\Delta W` from one float64 Gram
    matrix of the stored pair's difference
    (:func:`toolkit.metrics.spectral.difference_singular_values`) and each
    side's top-k subspace by block Krylov
    (:func:`toolkit.metrics.subspace.top_left`), both from float64 blocks of
    the stored values, so no full-size float32 or float64 copy of either side
    is made; the float32 matrices (:attr:`base`, :attr:`target`,
    :attr:`delta`) only when a metric registered outside this module reads
    them, or on another device.

    Parameters
    ----------
    base, target : torch.Tensor, shape (out, in)
        As stored (any float dtype; bf16 stays bf16 for bit comparison).
    device : str
        Where the factorisations run (``"cpu"``, ``"cuda"``).
    bases : dict, optional
        Precomputed subspaces ``{("base" | "target", k): TopSubspace}``, e.g. the
        base's from the previous pair of a series; filled as they are computed.
    tolerance : float, default 0.0
        The tolerance the shared pass counts unchanged entries with (other
        tolerances are counted on demand, see :meth:`unchanged`).
    sums : PairSums, optional
        The pair's sums when the caller has them already.

    Attributes
    ----------
    stored : tuple of two tensors in their storage dtypes
    numel : int
        Entries of one side.
    """

    def __init__(self, base, target, *, device="cpu", bases: dict | None = None, tolerance: float = 0.0,
                 sums: PairSums | None = None):
        if base.shape != target.shape:
            raise ValueError(f"shapes differ: {tuple(base.shape)} vs {tuple(target.shape)}")
        self.stored = (base, target)
        self.numel = base.numel()
        self.device = device
        self.bases = {} if bases is None else bases
        self.tolerance = float(tolerance)
        self._unchanged: dict[float, int] = {}
        if sums is not None:
            self.__dict__["sums"] = sums

    @cached_property
    def sums(self) -> PairSums:
        """The pair's entry-wise sums (:class:`~toolkit.metrics.pair_sums.PairSums`), one pass."""
        return pair_sums(*self.stored, self.tolerance)

    @cached_property
    def ratio_sums(self) -> PairSums:
        """:attr:`sums` of the pair times one power of two (exact) where float64 entries would make them
        subnormal (digits lost from ~1e-150 down) or overflow (from ~1e150 up): ratios of them (relative change,
        cosine) are the pair's own; their absolute values are not."""
        c = gram_scale(*self.stored)
        return self.sums if c == 1.0 else pair_sums(*(w * c for w in self.stored), self.tolerance)

    @cached_property
    def base(self) -> torch.Tensor:
        """The base matrix as float32."""
        return self.stored[0].to(torch.float32)

    @cached_property
    def target(self) -> torch.Tensor:
        """The target matrix as float32."""
        return self.stored[1].to(torch.float32)

    @property
    def identical(self) -> bool:
        """Both sides hold the same values as read (then every diff is known without work)."""
        return self.ratio_sums.identical

    @cached_property
    def delta(self) -> torch.Tensor:
        """:math:`\\Delta W = W_t - W_b`, float32."""
        return self.target - self.base

    @property
    def on_cpu(self) -> bool:
        """The factorisations run on the CPU, from the stored tensors by blocks."""
        return torch.device(self.device).type == "cpu" and self.stored[0].device.type == "cpu"

    @cached_property
    def delta_singular_values(self) -> torch.Tensor:
        """Singular values of :math:`\\Delta W`, float64, descending (shared by every spectral diff metric:
        one float64 Gram matrix and ``eigvalsh`` per pair)."""
        from toolkit.metrics.spectral import difference_singular_values, singular_values

        if self.on_cpu:
            return difference_singular_values(*self.stored)
        return singular_values(self.delta, device=self.device)

    def unchanged(self, tolerance: float = 0.0) -> int:
        """Entries whose stored value did not change (:func:`count_unchanged`)."""
        tolerance = float(tolerance)
        if tolerance == self.tolerance:
            return self.sums.unchanged
        if tolerance not in self._unchanged:
            self._unchanged[tolerance] = count_unchanged(*self.stored, tolerance)
        return self._unchanged[tolerance]

    def left_basis(self, side: str, k: int) -> torch.Tensor:
        """Top-``k`` left singular vectors of ``side`` (``"base"`` or ``"target"``), (out, k) float64."""
        return self.top_subspace(side, k).vectors

    def top_subspace(self, side: str, k: int) -> TopSubspace:
        r"""Top-``k`` left singular subspace of ``side`` with its bounds on :math:`\sigma_k`, :math:`\sigma_{k+1}`
        (:func:`toolkit.metrics.subspace.top_subspace`)."""
        key = (side, k)
        if key not in self.bases:
            if side == "target" and self.identical:
                self.bases[key] = self.top_subspace("base", k)
            else:  # each side cold: no warm start (issue 42). Where the Krylov route gave the other side up
                # (no gap it can certify: a Gaussian-like top spectrum), this side of the pair skips the attempt
                other = self.bases.get(("target" if side == "base" else "base", k))
                w = self.stored[0 if side == "base" else 1]
                self.bases[key] = top_subspace(w, k, device=self.device,
                                               krylov=not (other is not None and other.krylov_gave_up))
        return self.bases[key]


def relative_change(base, target, ctx: DiffContext) -> float:
    r"""Relative change :math:`\|W_t - W_b\|_F / \|W_b\|_F`, from the pair's float64 sums
    (:attr:`DiffContext.ratio_sums`).

    References: Mukherjee et al. (2025), arXiv:2505.11711, sec. 4.
    """
    s = ctx.ratio_sums
    if s.sumsq_base == 0.0:
        raise DegenerateMatrix("base matrix is all zeros")
    return math.sqrt(s.sumsq_delta / s.sumsq_base)


def update_sparsity(base, target, ctx: DiffContext, *, tolerance: float = 0.0) -> float:
    r"""Fraction of entries whose stored value did not change, :math:`\#\{ij: t_{ij} = b_{ij}\} / mn`.

    References: Mukherjee et al. (2025), arXiv:2505.11711, sec. 3 (update sparsity).
    """
    return ctx.unchanged(tolerance) / ctx.numel


def update_density(base, target, ctx: DiffContext, *, tolerance: float = 0.0) -> float:
    """Fraction of entries that changed, ``1 - update_sparsity``."""
    return 1.0 - ctx.unchanged(tolerance) / ctx.numel


def _delta_spectral(ctx: DiffContext, func, name: str) -> float:
    if ctx.identical:
        raise DegenerateMatrix("unchanged matrix (delta W = 0)", name)
    shape = torch.empty(ctx.stored[0].shape, device="meta")  # the metrics read the shape, not the entries
    try:
        return func(shape, ctx.delta_singular_values)
    except DegenerateMatrix as e:
        raise DegenerateMatrix(f"delta W: {e.reason}", name) from None


def delta_stable_rank(base, target, ctx: DiffContext) -> float:
    r"""Stable rank of :math:`\Delta W`: :math:`\|\Delta W\|_F^2 / \sigma_{max}(\Delta W)^2`."""
    from toolkit.metrics.spectral import stable_rank

    return _delta_spectral(ctx, stable_rank, "delta_stable_rank")


def delta_effective_rank(base, target, ctx: DiffContext) -> float:
    r"""Effective rank of :math:`\Delta W`: :math:`\exp(-\sum_i p_i \ln p_i)`, :math:`p_i = \sigma_i / \sum_j \sigma_j`
    over the singular values of :math:`\Delta W`."""
    from toolkit.metrics.spectral import effective_rank

    return _delta_spectral(ctx, effective_rank, "delta_effective_rank")


def delta_alpha(base, target, ctx: DiffContext) -> float:
    r"""Power-law exponent :math:`\alpha` of the ESD of :math:`\Delta W` (the ``alpha`` fit,
    :func:`toolkit.metrics.powerlaw.alpha`, on the eigenvalues of :math:`\Delta W^\top \Delta W`)."""
    from toolkit.metrics.powerlaw import alpha

    return _delta_spectral(ctx, alpha, "delta_alpha")


def delta_alpha_xmin(base, target, ctx: DiffContext) -> float:
    r""":math:`x_{min}` of ``delta_alpha``'s fit (the same fit, memoised on the update's spectrum): where the
    power law of :math:`\Delta W`'s ESD starts, which a kept update spectrum carries to its figure."""
    from toolkit.metrics.esd_fit import alpha_xmin

    return _delta_spectral(ctx, alpha_xmin, "delta_alpha_xmin")


def delta_matrix_rank(base, target, ctx: DiffContext) -> float:
    r"""Numerical rank of :math:`\Delta W` (``matrix_rank``'s tolerance,
    :func:`toolkit.metrics.esd_fit.matrix_rank`)."""
    from toolkit.metrics.esd_fit import matrix_rank

    return _delta_spectral(ctx, matrix_rank, "delta_matrix_rank")


def cosine_similarity(base, target, ctx: DiffContext) -> float:
    r"""Cosine of the flattened matrices, :math:`\langle W_b, W_t\rangle_F / (\|W_b\|_F \|W_t\|_F)`,
    from the pair's float64 sums (:attr:`DiffContext.ratio_sums`)."""
    s = ctx.ratio_sums
    if s.sumsq_base == 0.0 or s.sumsq_target == 0.0:
        raise DegenerateMatrix("a matrix is all zeros")
    if s.identical:
        return 1.0
    # each norm on its own: the product of two sums of squares leaves float64 from entries of 1e+-77 on
    return max(-1.0, min(1.0, s.dot / (math.sqrt(s.sumsq_base) * math.sqrt(s.sumsq_target))))


def subspace_overlap(base, target, ctx: DiffContext, *, k: int = 16) -> float:
    r"""Overlap of the top-k left singular subspaces, :math:`\|U_{b,k}^\top U_{t,k}\|_F^2 / k`.

    The mean of :math:`\cos^2\theta_i` over the k principal angles between
    the subspaces: 1 for the same subspace, about :math:`k/m` for random ones.
    ``k`` is clipped to ``min(out, in)``.

    Accuracy: the subspaces come from :func:`toolkit.metrics.subspace.top_left`
    (block Krylov on the CPU from a 1024-row Gram side up, the exact float64
    top-``k`` eigenvectors otherwise or when the Krylov bound is not reached),
    so the value is within 1e-5 (4 x :data:`toolkit.metrics.subspace.TOLERANCE`)
    of the exact route's: a proof where the trace bound holds, else a
    probability statement over a seed drawn from the matrix; no side starts
    from the other's block (:mod:`toolkit.metrics.krylov`).

    NaN with a reason where either side's top-``k`` subspace is not determined:
    :math:`\sigma_k - \sigma_{k+1}` within the rounding of its stored values or
    of the float64 solver (:func:`toolkit.metrics.subspace.check_separated`), or
    rank below ``k``. A gap smaller than the update itself is not NaN: a
    reordering across ``k`` that the update made is what the overlap reports,
    and :func:`subspace_overlap_sensitivity` beside it says whether the gap at
    ``k`` is above what an update of this size could move.

    References: Björck & Golub (1973), Math. Comp. 27(123), 579-594 (principal angles);
    Musco & Musco (2015), NeurIPS (randomized block Krylov).
    """
    if ctx.identical:
        return 1.0
    ub, ut = ctx.left_basis("base", k), ctx.left_basis("target", k)
    return min(1.0, float((ub.T @ ut).pow(2).sum()) / ub.shape[1])


def subspace_overlap_sensitivity(base, target, ctx: DiffContext, *, k: int = 16) -> float:
    r"""Sensitivity of the top-``k`` left singular subspace to the update, :math:`s = \|\Delta W\|_2 / \delta`.

    :math:`\delta = \max(\sigma_k(W_t) - \sigma_{k+1}(W_b),\ \sigma_k(W_b) - \sigma_{k+1}(W_t))`, the gap at
    ``k`` across the pair (its two terms sum to the two sides' own gaps at ``k``, so it is at least their mean
    and positive wherever ``subspace_overlap`` is a number). By Wedin's theorem (Wedin 1972, BIT 12:99-111;
    Stewart & Sun 1990, *Matrix Perturbation Theory*, thm. V.4.4, with the residuals
    :math:`-\Delta W\tilde V_k`, :math:`-\Delta W^\top \tilde U_k` of norm at most
    :math:`\|\Delta W\|_2`) every principal angle between the two top-``k`` subspaces has :math:`\sin\theta_i \le s`, so

    - :math:`s < 1`: ``subspace_overlap`` :math:`\ge 1 - s^2` for any update of this spectral norm; an overlap
      near that floor is a rotation the update's size alone allows, one well above it is a subspace the
      update left in place;
    - :math:`s \ge 1`: the gap at ``k`` is within what the update could move: directions near
      :math:`\sigma_k` may have swapped places across ``k`` (a degenerate cluster of a random or lightly
      trained matrix, or an SVD-style fine-tune's reordering), and the overlap counts them as change.

    The value is an upper bound on :math:`s`: :math:`\sigma_k` from below (a Ritz value, or the exact route's
    eigenvalue less its solver error), :math:`\sigma_{k+1}` from above (the exact route's plus its error, or
    the Krylov route's :math:`\lambda^+`: a proof where its trace bound holds, else its residual estimate, a
    probability statement over the seed, :mod:`toolkit.metrics.krylov`), :math:`\|\Delta W\|_2` the
    update's largest singular value (the spectral diff metrics' shared spectrum). 0 for an unchanged matrix.
    ``k`` as ``subspace_overlap``'s (clipped to ``min(out, in)``).

    Raises
    ------
    DegenerateMatrix
        Either side's top-``k`` subspace not determined (as ``subspace_overlap``), or a gap across the pair
        whose bounds do not show it positive (:math:`\delta \le 0`: no bound).
    """
    if ctx.identical:
        return 0.0
    b, t = ctx.top_subspace("base", k), ctx.top_subspace("target", k)
    kk = b.vectors.shape[1]
    gap = max(t.sigma_k - b.sigma_next, b.sigma_k - t.sigma_next)
    if not gap > 0:
        raise DegenerateMatrix(
            f"sigma_{kk} of each side is not above the other's sigma_{kk + 1} (gap {gap:.3g}): the update reaches "
            f"across k={kk}, no bound on the subspace's rotation")
    norm = float(ctx.delta_singular_values[0])
    return norm / gap


#: Reference of relative change and update sparsity.
REFERENCE_MUKHERJEE = ("Mukherjee et al. (2025), Reinforcement Learning Finetunes Small Subnetworks in "
                       "Large Language Models, arXiv:2505.11711")
#: What "unchanged" means, for the descriptions.
UNCHANGED_RULE = ("stored values compared bit for bit in the coarser storage dtype of the two sides "
                  "(|t - b| <= tolerance when tolerance > 0)")
_TOL, _K = {"tolerance": 0.0}, {"k": 16}
_METRICS = (  # name, function, long_name, description, reference, options, reads the matrices
    ("relative_change", relative_change, "relative weight change", "||W_t - W_b||_F / ||W_b||_F",
     REFERENCE_MUKHERJEE, None, False),
    ("update_sparsity", update_sparsity, "update sparsity",
     f"fraction of entries unchanged, #{{ij: t_ij = b_ij}} / (m n); {UNCHANGED_RULE}", REFERENCE_MUKHERJEE, _TOL,
     False),
    ("update_density", update_density, "update density",
     f"fraction of entries changed, 1 - update_sparsity; {UNCHANGED_RULE}", REFERENCE_MUKHERJEE, _TOL, False),
    ("delta_stable_rank", delta_stable_rank, "stable rank of the update",
     "||dW||_F^2 / sigma_max(dW)^2, dW = W_t - W_b", "Rudelson & Vershynin (2007), J. ACM 54(4):21", None, True),
    ("delta_effective_rank", delta_effective_rank, "effective rank of the update",
     "exp(-sum_i p_i ln p_i), p_i = sigma_i(dW) / sum_j sigma_j(dW), dW = W_t - W_b",
     "Roy & Vetterli (2007), EUSIPCO, Definition 1", None, True),
    ("delta_alpha", delta_alpha, "power-law exponent of the update's ESD",
     "alpha of the eigenvalues of dW^T dW, dW = W_t - W_b (MLE, xmin by minimum KS distance, as alpha)",
     "Martin & Mahoney (2021), JMLR 22(165); Clauset et al. (2009), SIAM Rev. 51(4)", None, True),
    ("delta_matrix_rank", delta_matrix_rank, "numerical rank of the update",
     "#{i: sigma_i(dW) > max(m, n) eps sigma_max(dW)}, dW = W_t - W_b (NumPy's matrix_rank tolerance)",
     REFERENCE_MUKHERJEE, None, True),
    ("cosine_similarity", cosine_similarity, "cosine similarity",
     "<W_b, W_t>_F / (||W_b||_F ||W_t||_F), matrices flattened", "cosine of the Frobenius inner product", None,
     False),
    ("subspace_overlap", subspace_overlap, "top-k left singular subspace overlap",
     "||U_b,k^T U_t,k||_F^2 / k = mean cos^2 of the k principal angles between the top-k left singular "
     "subspaces of W_b and W_t", "Bjorck & Golub (1973), Math. Comp. 27(123):579-594", _K, True),
    ("subspace_overlap_sensitivity", subspace_overlap_sensitivity, "sensitivity of the top-k subspace to the update",
     "||dW||_2 / max(sigma_k(W_t) - sigma_k+1(W_b), sigma_k(W_b) - sigma_k+1(W_t)), an upper bound on the sine of "
     "every principal angle (s < 1: subspace_overlap >= 1 - s^2 for any update this size; s >= 1: the gap at k is "
     "within the update's reach)", "Wedin (1972), BIT 12:99-111; Stewart & Sun (1990), Matrix Perturbation Theory, "
     "thm. V.4.4", _K, True),
)
#: This module's metric functions: they read only the context, never the float32 matrices.
_CTX_ONLY = frozenset(m[1] for m in _METRICS)
for _name, _func, _long, _desc, _ref, _opts, _matrices in _METRICS:
    register_metric(_name, _func, long_name=_long, units="1", description=_desc, reference=_ref, kind="diff",
                    options=_opts, needs_matrices=_matrices)
register_metric("delta_alpha_xmin", delta_alpha_xmin, long_name="power-law xmin of the update's ESD", units="1",
                description="xmin of delta_alpha's fit of the eigenvalues of dW^T dW, dW = W_t - W_b (minimum KS "
                "distance)", reference="Clauset et al. (2009), SIAM Rev. 51(4)", kind="diff", opt_in=True)


def metric_options(metric, overrides: dict) -> dict:
    """The options a diff metric is called with: its registered defaults, updated
    by the ``overrides`` it declares (``tolerance``, ``k``); others are ignored."""
    opts = dict(metric.options)
    opts.update({k: v for k, v in overrides.items() if k in opts})
    return opts


def compute_diff_metrics(base, target, metrics=None, *, ctx: DiffContext | None = None, device="cpu",
                         **overrides) -> dict[str, MetricValue]:
    """Every requested diff metric of one pair of matrices, sharing one :class:`DiffContext`.

    Parameters
    ----------
    base, target : torch.Tensor, shape (out, in)
        As stored (bf16 stays bf16).
    metrics : str, list of str or None
        Diff metric names (None: every registered diff metric).
    ctx : DiffContext, optional
        Reuse a context (and its cached factorisations).
    **overrides
        ``tolerance=``, ``k=``: passed to the metrics that declare them.

    Returns
    -------
    dict of name -> MetricValue
        NaN with a reason where undefined.

    Examples
    --------
    >>> w = torch.randn(8, 4)
    >>> compute_diff_metrics(w, 2 * w, ["relative_change", "cosine_similarity"])["relative_change"].value
    1.0
    """
    ctx = ctx or DiffContext(base, target, device=device, tolerance=overrides.get("tolerance", 0.0))
    return {m.name: evaluate_diff(m, ctx, metric_options(m, overrides)) for m in resolve_metrics(metrics, kind="diff")}


def evaluate_diff(metric, ctx: DiffContext, options: dict) -> MetricValue:
    """Call one diff metric on a pair's context, turning :class:`DegenerateMatrix` (and a bare NaN) into
    NaN with a reason. Metrics registered with ``needs_matrices=False``, and this module's own (which read
    only ``ctx``), get ``None`` for both matrices: no float32 copies are made for them."""
    reads = metric.needs_matrices and metric.func not in _CTX_ONLY
    base, target = (ctx.base, ctx.target) if reads else (None, None)
    try:
        value = float(metric.func(base, target, ctx, **options))
    except DegenerateMatrix as e:
        return MetricValue(math.nan, e.reason)
    return MetricValue(value, "undefined for this matrix" if math.isnan(value) else "")
