"""Gradient norms of the next-token loss with respect to each component's weight.

One backward per batch on the *sum* of the token losses of that batch; the
gradients accumulate in ``.grad``, and dividing by the number of predicted
tokens at the end gives the gradient of the mean loss over all texts,
whatever the batching. Only component weights require a gradient while it
runs (so memory holds one gradient per component matrix, not for
embeddings); every parameter's ``requires_grad`` and ``.grad`` are put back
afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def next_token_loss_sum(logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of ``-log p(x_{t+1} | x_<=t)`` over the non-padding targets, and their count.

    Parameters
    ----------
    logits : torch.Tensor, shape (batch, seq, vocab)
    input_ids, mask : torch.Tensor, shape (batch, seq)
        Token ids and 1 at real tokens (right padding).

    Returns
    -------
    (loss_sum, count) : (0-d tensor in nats, int)
    """
    # right padding: text b predicts its real tokens 1..n-1 from positions 0..n-2, one slice of ``logits`` per
    # text (no copy of the (tokens, vocab) rows, as gathering them with a mask or index_select would make)
    lengths = mask.bool().sum(1).tolist()
    loss, count = logits.new_zeros((), dtype=torch.float32), 0
    for b, n in enumerate(lengths):
        if n > 1:
            loss = loss + torch.nn.functional.cross_entropy(logits[b, :n - 1].float(), input_ids[b, 1:n].to(
                logits.device), reduction="sum")
            count += n - 1
    return loss, count


@contextmanager
def only_grad_for(model: torch.nn.Module, params: list[torch.nn.Parameter]):
    """Within the block only ``params`` require a gradient, with ``.grad`` starting at None."""
    saved = [(p, p.requires_grad, p.grad) for p in model.parameters()]
    wanted = {id(p) for p in params}
    try:
        for p, _, _ in saved:
            p.requires_grad_(id(p) in wanted)
            p.grad = None
        yield
    finally:
        for p, flag, grad in saved:
            p.grad = grad
            p.requires_grad_(flag)


def gradient_norms(pieces: dict, params: dict, count: int) -> dict:
    """``{(layer, component): ||grad||_F}`` of the mean loss over ``count`` tokens.

    Parameters
    ----------
    pieces : dict of (layer, component) -> Piece
        ``piece.extract`` turns a gradient of the stored layout (GPT-2
        ``Conv1D`` (in, out), fused rows) into the component's (out, in) rows.
    params : dict of (layer, component) -> torch.nn.Parameter
    count : int
        Predicted tokens of all texts (the mean's denominator).
    """
    out = {}
    for key, piece in pieces.items():
        grad = params[key].grad
        if grad is None or count == 0:
            out[key] = float("nan")
            continue
        g = piece.extract(grad.detach())
        out[key] = float(torch.linalg.vector_norm(g if g.is_floating_point() else g.float())) / count
    return out
