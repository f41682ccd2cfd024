"""Forward hooks on component modules that keep running reductions, never tensors.

Each hooked module (``q_proj``, a fused ``qkv_proj``, GPT-2's ``c_attn``...)
gets one hook. On every forward the hook drops the padding tokens, cuts the
output into the module's canonical components with each piece's
``out_index`` (the same mapping the weight statistics use), and folds the
values into float64 accumulators: count, mean, central moments 2-4 and
max |x| (:class:`Moments`); the input's sum of squares; per-head sums of
squares for q, k and v. Nothing else is kept, so memory stays at one
module's output at a time. Hooks only read: they return None and never touch
the tensors the model goes on with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from toolkit.errors import ToolkitError


class LayerHooks:
    """Context manager base: one forward hook per layer, registered on entry, removed on exit.

    Subclasses define ``_hooked_modules()`` (``{layer: torch.nn.Module}``) and
    ``_hook(layer)`` (the forward hook for that layer's module).
    """

    def __enter__(self):
        self._handles = [module.register_forward_hook(self._hook(layer))
                         for layer, module in self._hooked_modules().items()]
        return self

    def __exit__(self, *exc):
        for h in getattr(self, "_handles", ()):
            h.remove()
        self._handles = []
        return False


#: The range of ``max |x - c|`` over a float32 batch whose powers :class:`Moments` forms in float32: beyond it
#: ``(x - c)^4`` (1e-29 to 8e28) would leave float32's normal range, or its sum over 1e7 values would.
_SPAN32 = (2.0**-24, 2.0**24)


class Moments:
    """Streaming moments of a (tokens, features) stream: each batch's power sums about a centre near its own
    mean, merged in float64 as central moments.

    A batch is centred on ``c``, the running mean rounded to the batch's dtype (so the subtraction is exact),
    or, for the first batch and for one whose value range does not hold the running mean (an unrepresentative
    first batch, a NaN or inf so far), on the mean of its own finite values (one more read of it; summed again in
    float64 when its float32 sum overflows, as it does for finite values near 3.4e38). Its sums
    ``S_k = sum (x - c)^k`` (``k = 1..4``) give its central moments without cancellation, because ``c`` lies
    near its mean; these are merged into the running ones by the pairwise formulas of Chan et al. and Pébay
    (float64), so a batch far from the others costs no precision. The sum of squares per feature is kept too
    (:meth:`feature_sumsq`): from the centred sums, or, for a batch holding an inf or NaN, as ``sum x^2`` in
    float64 directly (the centred form would meet ``inf - inf`` where NumPy's ``mean(x**2)`` is inf).

    Attributes
    ----------
    n : int
        Values seen (tokens x features).
    tokens : int
        Rows seen.
    c : float or None
        The centre of the last batch (None before any value).
    central : tuple of float
        ``(mean, M2, M3, M4)``: the mean and the sums of ``(x - mean)^k`` over every value (float64).
    sumsq : torch.Tensor or None, shape (features,), float64
        ``sum_t x[t, f]^2`` per feature.
    max_abs : float
        ``max |x|`` (0 before any value; NaN once a NaN was seen).

    Notes
    -----
    A batch of ``b`` values with ``r = S_1 / b`` has mean ``c + r``, ``M2 = S_2 - b r^2``,
    ``M3 = S_3 - 3 r S_2 + 2 b r^3``, ``M4 = S_4 - 4 r S_3 + 6 r^2 S_2 - 3 b r^4``; excess kurtosis is
    ``n M4 / M2^2 - 3`` and the RMS ``sqrt(sum sumsq / n)`` (no difference of large numbers). Element-wise work and
    the sums over one batch run in the batch's dtype (float32; bf16/fp16 are converted to float32; float64 when the
    batch's ``max |x - c|`` lies outside :data:`_SPAN32`) with torch's cascaded sums (relative error a few float32
    ulps, measured 1e-6 for ``S_3`` and 4e-8 for ``S_4`` against float64 on 430 x 1536 Gaussian batches); every sum
    across batches is float64. A batch makes one temporary the size of ``x`` besides ``x - c`` (none of its own when
    ``x`` is a copy the caller owns): ``d = x - c``, ``d2 = d * d``, then ``d *= d2`` for ``S_3`` and ``d2 *= d2``
    for ``S_4`` in place.
    """

    __slots__ = ("n", "tokens", "c", "central", "sumsq", "max_abs")

    def __init__(self):
        self.n, self.tokens, self.c, self.central, self.sumsq, self.max_abs = 0, 0, None, (0.0,) * 4, None, 0.0

    def add(self, x: torch.Tensor, *, owned: bool = False) -> None:
        """Fold the rows of ``x`` (tokens, features) in; ``owned``: ``x`` is a copy nobody else reads,
        which may be overwritten (one temporary fewer)."""
        x = x.detach()
        x = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
        if x.dtype not in (torch.float32, torch.float64):
            x, owned = x.float(), True
        if x.numel() == 0:
            return
        lo, hi = (float(v) for v in torch.aminmax(x))
        top = max(-lo, hi)  # NaN propagates (Python's max would skip it past the first place)
        self.max_abs = math.nan if math.isnan(top) or math.isnan(self.max_abs) else max(self.max_abs, top)
        c = _rounded(self.central[0], x.dtype) if self.n else math.nan  # exact in x's dtype
        finite = math.isfinite(lo) and math.isfinite(hi)
        if not lo <= c <= hi:  # the first batch, one the running mean is outside of, or a NaN / inf so far
            c = _centre(x if finite else x[torch.isfinite(x)])  # every value finite: no mask to build (a copy)
        direct = None if finite else x.double().square().sum(0)  # inf - inf would come out of the sums below
        span = max(hi - c, c - lo)
        if x.dtype == torch.float32 and (0 < span < _SPAN32[0] or span > _SPAN32[1]):
            x, owned = x.double(), True  # (x - c)^4 would underflow or overflow float32 (or its sum would)
        t, b = x.shape[0], x.numel()
        d = x.sub_(c) if owned else x - c
        d2 = d * d
        sums = torch.stack([d.sum(0), d2.sum(0)]).to(torch.float64)
        s1, s2 = sums.sum(1).tolist()
        if 2 * s1 * s1 > s2 * b:  # the batch's mean is more than a standard deviation from c: centre on it
            shift = _rounded(c + s1 / b, x.dtype) - c  # |x - c| is within the batch's range: d - shift is
            c = c + shift  # x - c to a few ulps of that range, against (x - c)^2 summed with this mean removed
            torch.mul(d.sub_(shift), d, out=d2)
            sums = torch.stack([d.sum(0), d2.sum(0)]).to(torch.float64)
            s1, s2 = sums.sum(1).tolist()
        self.c = c
        sumsq = sums[1].add_(sums[0], alpha=2 * c).add_(t * c * c) if direct is None else direct  # sum_t x^2
        self.sumsq = sumsq if self.sumsq is None else self.sumsq.add_(sumsq)
        s3 = float(d.mul_(d2).sum())  # d is this batch's own: x - c, or the caller's copy
        s4 = float(d2.square_().sum())
        r = s1 / b
        rr = r * r  # products, not powers: a float's ** raises OverflowError past 1e308 where * gives inf
        batch = (c + r, s2 - b * rr, s3 - 3 * r * s2 + 2 * b * rr * r, s4 - 4 * r * s3 + 6 * rr * s2 - 3 * b * rr * rr)
        self.central = _merge(self.n, self.central, b, batch)
        self.n += b
        self.tokens += t

    @property
    def mean(self) -> float:
        """Mean of every value; NaN before any value."""
        return self.central[0] if self.n else math.nan

    @property
    def rms(self) -> float:
        """``sqrt(mean(x^2))``; NaN before any value."""
        return math.sqrt(float(self.sumsq.sum()) / self.n) if self.n else math.nan

    @property
    def kurtosis(self) -> float:
        """Excess (Fisher) kurtosis ``m4 / m2^2 - 3`` (0 for a Gaussian, as the weight metric ``kurtosis``);
        NaN if empty or constant."""
        _, m2, _, m4 = self.central
        return self.n * m4 / (m2 * m2) - 3.0 if self.n and m2 > 0 else math.nan

    def feature_sumsq(self) -> torch.Tensor | None:
        """``sum_t x[t, f]^2`` per feature (float64), or None before any value."""
        return self.sumsq


def _centre(x: torch.Tensor) -> float:
    """The mean of ``x`` (finite values) rounded to its dtype, 0 when empty. Summed in ``x``'s dtype, and again in
    float64 when that overflows (float32 values near 3.4e38: their float32 sum is inf, their mean is not)."""
    if not x.numel():
        return 0.0
    c = float(x.mean())
    if not math.isfinite(c):
        c = _rounded(float(x.mean(dtype=torch.float64)), x.dtype)
    return c


def _rounded(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (float32 or float64), as a Python float."""
    return value if dtype == torch.float64 else float(np.float32(value))


def _merge(na: int, a: tuple, nb: int, b: tuple) -> tuple:
    """``(mean, M2, M3, M4)`` of two sets of ``na`` and ``nb`` values with these central moments (Pébay 2008,
    eq. 2.1-2.4); float64."""
    if na == 0:
        return b
    (mu_a, m2a, m3a, m4a), (mu_b, m2b, m3b, m4b) = a, b
    n = na + nb
    delta = mu_b - mu_a
    if not math.isfinite(delta):  # an inf so far: the means as NumPy's (inf, not inf - inf); moments NaN
        return ((na * mu_a + nb * mu_b) / n,) + (math.nan,) * 3
    f = delta / n
    m2 = m2a + m2b + delta * f * na * nb
    m3 = m3a + m3b + delta * f * f * na * nb * (na - nb) + 3 * f * (na * m2b - nb * m2a)
    m4 = (m4a + m4b + delta * f * f * f * na * nb * (na * na - na * nb + nb * nb)
          + 6 * f * f * (na * na * m2b + nb * nb * m2a) + 4 * f * (na * m3b - nb * m3a))
    return mu_a + f * nb, m2, m3, m4


@dataclass
class Batch:
    """What the hooks need to know about the batch running now.

    Attributes
    ----------
    mask : torch.BoolTensor, shape (batch, seq)
        True at real tokens, False at padding (right padding).
    lengths : list of int, length batch
        Real tokens of each row.
    text_index : list of int, length batch
        Position of each row's text in the user's list.
    """

    mask: torch.Tensor
    lengths: list[int]
    text_index: list[int]

    @property
    def full(self) -> bool:
        """No padding in this batch."""
        return min(self.lengths) == self.mask.shape[1]

    @cached_property
    def rows(self) -> torch.Tensor:
        """Flat indices of the real tokens in ``(batch * seq)`` (int64, on the mask's device), computed once per
        batch: ``index_select`` with them is about 9x faster than indexing with the boolean mask, which
        searches the mask again on every call (1,650 hooked outputs per pass of SmolLM2)."""
        return self.mask.reshape(-1).nonzero().squeeze(1)


def _all_rows(x: torch.Tensor, batch: Batch, where: str) -> torch.Tensor:
    """``x`` of shape (batch, seq, f), (batch*seq, f) or (batch, 1, seq, f) (a single-head latent, DeepSeek's
    ``kv_b_proj`` input) as (batch*seq, f), padding rows included (a view where the layout allows)."""
    mask = batch.mask
    if x.ndim == 4 and x.shape[1] == 1 and (x.shape[0], x.shape[2]) == tuple(mask.shape):
        x = x[:, 0]
    if x.shape[:-1] == mask.shape or (x.ndim == 2 and x.shape[0] == mask.numel()):
        return x.reshape(-1, x.shape[-1])
    raise ToolkitError(f"{where}: expected a tensor of shape (batch, seq, features) = "
                       f"({', '.join(map(str, mask.shape))}, f), got {tuple(x.shape)}")


def token_rows(x: torch.Tensor, batch: Batch, where: str) -> torch.Tensor:
    """The non-padding rows of ``x`` (shapes as :func:`_all_rows`) -> (tokens, f): ``x`` itself, reshaped,
    when the batch has no padding, else a copy."""
    flat = _all_rows(x, batch, where)
    return flat if batch.full else flat.index_select(0, batch.rows)


def token_sumsq(x: torch.Tensor, batch: Batch, where: str) -> tuple[float, int]:
    """``(sum of x^2 over the non-padding rows, their number of entries)`` of ``x`` (shapes as
    :func:`_all_rows`), without gathering the rows: the norm of every row (one read; torch's cascaded sum),
    squared and summed over the real tokens in float64. Measured on SmolLM2-shaped batches (8 x 54 x 576,
    one thread): 67 us and 1e-9 relative error, against 145 us and 8e-7 for gathering the rows and one
    float32 BLAS dot."""
    flat = _all_rows(x, batch, where)
    norms = torch.linalg.vector_norm(flat, dim=-1, dtype=None if flat.dtype in (torch.float32, torch.float64)
                                     else torch.float32).to(torch.float64).square_()
    real = norms if batch.full else norms[batch.rows]
    return float(real.sum()), int(real.numel()) * flat.shape[-1]


@dataclass
class Accumulator:
    """Running reductions of one (layer, component)."""

    output: Moments = field(default_factory=Moments)
    input_sumsq: float = 0.0  # sum of x^2 over the module's input
    input_count: int = 0  # entries of the input seen


@dataclass(frozen=True)
class Target:
    """One component of one hooked module: where its output columns are."""

    key: tuple[int, str]  # (layer, component)
    out_index: object  # slice, LongTensor or None


class ComponentRecorder:
    """Hooks on every component module; a context manager.

    Parameters
    ----------
    modules : dict of nn.Module -> list of Target
        Each module with the components its output holds.
    batch : callable
        ``batch() -> Batch``, the batch running now.

    Attributes
    ----------
    acc : dict of (layer, component) -> Accumulator
    calls : dict of (layer, component) -> int
        Forward calls seen per component (0: its module never ran).
    """

    def __init__(self, modules: dict, batch):
        self._modules = modules
        self._batch = batch
        self._handles = []
        self.acc = {t.key: Accumulator() for ts in modules.values() for t in ts}
        self.calls = {k: 0 for k in self.acc}
        self._last_input = (None, None)

    def _input_sumsq(self, x: torch.Tensor, batch: Batch, where: str) -> tuple[float, int]:
        """Sum of squares of a module input; q, k and v share one input tensor, measured once."""
        last, value = self._last_input  # holding ``last`` keeps its memory from being reused
        if x is not last or x._version != value[2]:
            sq, n = token_sumsq(x, batch, where)
            self._last_input = (x, (sq, n, x._version))
        return self._last_input[1][:2]

    def _hook(self, targets):
        def hook(module, args, kwargs, output):
            batch = self._batch()
            where = f"layer {targets[0].key[0]} {'/'.join(t.key[1] for t in targets)}"
            y = output[0] if isinstance(output, (tuple, list)) else output
            x = args[0] if args else next((v for v in kwargs.values() if torch.is_tensor(v)), None)
            if x is None:
                raise ToolkitError(f"{where}: {type(module).__name__} was called without an input tensor")
            with torch.no_grad():
                sq_in, n_in = self._input_sumsq(x, batch, where)
                y_out = token_rows(y.detach(), batch, where)
                owned = not batch.full and len(targets) == 1  # index_select's copy, read by this target only
                for t in targets:
                    acc = self.acc[t.key]
                    self.calls[t.key] += 1
                    part = y_out if t.out_index is None else y_out[:, t.out_index]
                    acc.output.add(part, owned=owned and t.out_index is None)
                    acc.input_sumsq += sq_in
                    acc.input_count += n_in
            return None

        return hook

    def __enter__(self):
        for module, targets in self._modules.items():
            self._handles.append(module.register_forward_hook(self._hook(targets), with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._last_input = (None, None)
        return False

    def input_rms(self, key) -> float:
        """``sqrt(sum x^2 / count)`` of the module input; NaN if it never ran."""
        acc = self.acc[key]
        return math.sqrt(acc.input_sumsq / acc.input_count) if acc.input_count else math.nan

    def head_rms(self, key, head_dim: int) -> torch.Tensor | None:
        """``sqrt(sum_sq / (tokens * head_dim))`` per head (float64, CPU), or None."""
        out = self.acc[key].output
        sq = out.feature_sumsq()
        if sq is None or sq.numel() % head_dim:
            return None
        return (sq.reshape(-1, head_dim).sum(1) / (out.tokens * head_dim)).sqrt().cpu()

