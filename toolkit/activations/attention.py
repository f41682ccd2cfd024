"""Attention maps from the eager implementation, reduced per head inside the hook.

``transformers`` attention modules (``LlamaAttention``, ``GPT2Attention``,
``BertSelfAttention``...) return ``(attn_output, attn_weights)``; only the
eager implementation fills ``attn_weights`` with the post-softmax map, shape
(batch, query heads, N, N) (keys and values already repeated for
grouped-query attention). A forward hook on each layer's attention module
checks the map (causal, rows summing to 1), turns each text's block into
three numbers per head (:func:`head_statistics`) and lets the map go; the
model's own ``output_attentions`` (which keeps every layer's map until the
end) is not used.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from toolkit.activations.hooks import LayerHooks
from toolkit.errors import AttentionUnavailableError


def head_statistics(a: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """Frobenius norm, entropy and sink mass of each head's attention map of one text.

    Parameters
    ----------
    a : torch.Tensor, shape (heads, N, N)
        Post-softmax attention of one text without padding: ``a[h, i, j]``
        is the weight query ``i`` puts on key ``j``.
    causal : bool
        Decoder attention: query 0 (which attends only to itself) is left
        out of the entropy and the sink mass.

    Returns
    -------
    torch.Tensor, shape (3, heads), float64
        Rows: ``||A||_F``; mean row entropy (nats); mean weight on key 0.

    Notes
    -----
    ``||A||_F = sqrt(sum_ij A_ij^2)``, ``H = mean_i(-sum_j A_ij log A_ij)``
    with ``0 log 0 = 0``, ``sink = mean_i A_i0``.
    """
    a = a.to(torch.float64)
    fro = a.square().sum((-2, -1)).sqrt()
    rows = a[:, 1:, :] if causal else a
    entropy = -torch.special.xlogy(rows, rows).sum(-1).mean(-1)
    sink = rows[..., 0].mean(-1)
    return torch.stack([fro, entropy, sink])


def batch_head_statistics(w: torch.Tensor, lengths, *, causal: bool, where: str) -> torch.Tensor:
    """:func:`check_attention_map` and :func:`head_statistics` for a right-padded batch at once.

    Parameters
    ----------
    w : torch.Tensor, shape (batch, heads, N, N)
        Post-softmax maps of a batch; text ``b`` has ``lengths[b]`` real
        tokens at positions ``0 .. lengths[b]-1``.
    lengths : sequence of int, length batch

    Returns
    -------
    torch.Tensor, shape (3, batch, heads), float64
        As :func:`head_statistics` for each text's ``(heads, L, L)`` block.

    Notes
    -----
    The block's query rows are the text's first ``L`` rows; their weight on
    the padding keys is zero (masked), so whole-row sums equal block sums.
    Element-wise work and sums over keys stay in the map's dtype (float32 for
    bf16/fp16 maps); sums over queries are float64.
    """
    if w.dtype not in (torch.float32, torch.float64):
        w = w.float()
    n = w.shape[-1]
    pos = torch.arange(n, device=w.device)
    length = torch.as_tensor(list(lengths), device=w.device)
    rows = pos[None, :] < length[:, None]  # (batch, N): real query rows
    w = torch.where(rows[:, None, :, None], w, 0)  # padding query rows out (they may hold anything)
    check_attention_map(w, causal=causal, where=where, rows=rows[:, None, :])
    f64 = torch.float64
    counted = rows & (pos >= 1)[None, :] if causal else rows  # query 0 of a decoder left out
    weight = counted[:, None, :].to(f64) / counted.sum(-1)[:, None, None].to(f64)
    fro = ((w * w).sum(-1).to(f64) * rows[:, None, :]).sum(-1).sqrt()
    entropy = -(torch.special.xlogy(w, w).sum(-1).to(f64) * weight).sum(-1)
    sink = (w[..., 0].to(f64) * weight).sum(-1)
    return torch.stack([fro, entropy, sink])


def check_attention_map(a: torch.Tensor, *, causal: bool, where: str, rows=None) -> None:
    """Raise unless ``a`` (..., N, N) is a causal (if asked) row-stochastic map.

    ``rows`` (broadcastable to ``a.shape[:-1]``, bool): the query rows whose
    sums are checked (default all).

    Raises
    ------
    AttentionUnavailableError
        Weight above the diagonal of a decoder, rows that do not sum to 1,
        negative or non-finite weights.
    """
    tol = 1e-4 if a.dtype in (torch.float32, torch.float64) else 2e-2
    low = a.amin().item() if a.numel() else 0.0
    if not low >= 0:  # NaN compares False
        raise AttentionUnavailableError(where, "the attention map has negative or non-finite weights")
    if causal and a.shape[-1] > 1:
        above = torch.triu(a, diagonal=1).amax().item()
        if above > 1e-6:
            raise AttentionUnavailableError(
                where, f"the map of a decoder has weight {above:.3g} above the diagonal (not causal)")
    dev = (a.sum(-1).to(torch.float64) - 1).abs()
    if rows is not None:
        dev = dev * rows
    err = dev.amax().item() if dev.numel() else 0.0
    if err != err:
        err = float("inf")
    if err > tol:
        raise AttentionUnavailableError(
            where, f"attention rows sum to 1 +- {err:.3g}, not a softmax distribution over the text's tokens")


class AttentionRecorder(LayerHooks):
    """Hooks on each layer's attention module that keep per-head statistics per text.

    Parameters
    ----------
    modules : dict of int -> nn.Module
        Layer -> its attention module (whose output is ``(out, weights)``).
    batch : callable
        ``batch() -> hooks.Batch``, the batch running now.
    num_texts, num_heads : int
    causal : bool

    Attributes
    ----------
    values : torch.Tensor, shape (3, layer, head, text), float64
        Frobenius norm, entropy, sink mass; NaN until recorded.
    seen : set of int
        Layers whose hook ran during the last batch (reset by :meth:`start_batch`).
    """

    def __init__(self, modules: dict, batch, *, num_texts: int, num_heads: int, causal: bool, model_type: str = ""):
        self._modules = modules
        self._batch = batch
        self._handles = []
        self.causal = causal
        self.model_type = model_type
        self.values = torch.full((3, max(modules) + 1 if modules else 0, num_heads, num_texts), float("nan"),
                                 dtype=torch.float64)
        self.seen: set[int] = set()

    def _hook(self, layer: int):
        def hook(module, args, output):
            where = f"{self.model_type} layer {layer} ({type(module).__name__})"
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            b = self._batch()
            if not torch.is_tensor(weights) or weights.ndim != 4 or weights.numel() == 0:
                got = "None" if weights is None else (f"shape {tuple(weights.shape)}" if torch.is_tensor(weights)
                                                      else type(weights).__name__)
                raise AttentionUnavailableError(where, f"the attention module returned no attention map ({got})")
            if weights.shape[0] != len(b.lengths) or weights.shape[1] != self.values.shape[2]:
                raise AttentionUnavailableError(
                    where, f"expected maps of shape (batch={len(b.lengths)}, heads={self.values.shape[2]}, N, N), "
                           f"got {tuple(weights.shape)}")
            with torch.no_grad():
                stats = batch_head_statistics(weights.detach(), b.lengths, causal=self.causal, where=where)
                per_layer = self.values[:, layer]  # view (3, head, text)
                per_layer[:, :, list(b.text_index)] = stats.permute(0, 2, 1).cpu()
            self.seen.add(layer)
            return None

        return hook

    def start_batch(self) -> None:
        self.seen = set()

    def check_batch(self) -> None:
        """Raise if a layer's attention module did not report during the last forward."""
        missing = sorted(set(self._modules) - self.seen)
        if missing:
            raise AttentionUnavailableError(
                f"{self.model_type} layers {missing}", "the attention module was never called on this batch")

    def _hooked_modules(self) -> dict:
        return self._modules


@contextmanager
def eager_attention(model):
    """Switch ``model`` to the eager attention implementation for the block, then back.

    Raises
    ------
    AttentionUnavailableError
        The model cannot run eager attention.
    """
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before in (None, "eager"):
        yield
        return
    try:
        model.set_attn_implementation("eager")
    except (ValueError, ImportError, AttributeError, NotImplementedError) as err:
        raise AttentionUnavailableError(
            str(getattr(config, "model_type", type(model).__name__)),
            f"cannot switch from {before!r} to the eager implementation: {err}") from err
    try:
        yield
    finally:
        model.set_attn_implementation(before)
