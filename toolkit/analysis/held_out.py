"""Next-token perplexity of a loaded causal model on a text, in fixed windows.

The text is tokenized once, cut into consecutive non-overlapping windows of ``window`` tokens (the last one
shorter), and the model predicts every token of a window from the ones before it in that window; the
perplexity is ``exp`` of the mean next-token cross-entropy over all predicted tokens (nats). Non-overlapping
windows are the cheap variant of the sliding-window evaluation (Hugging Face, "Perplexity of fixed-length
models"): it reads a higher perplexity than a sliding window, the same for every pruned model compared.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from toolkit.activations.gradients import next_token_loss_sum
from toolkit.data import data_path
from toolkit.options import read_text_file

__all__ = ["HELD_OUT_TEXT", "load_held_out", "perplexity", "window_losses"]

#: ``data/heldout.txt``: plain English prose written for this evaluation, used by no prompt or training file.
HELD_OUT_TEXT = data_path("heldout.txt")


def load_held_out(path: str | os.PathLike | None = None) -> str:
    """The held-out text (:data:`HELD_OUT_TEXT` by default), as one str."""
    return read_text_file(Path(path) if path is not None else HELD_OUT_TEXT, "held-out text",
                          "or read it with its own encoding and pass the str")


@torch.no_grad()
def window_losses(loaded, text: str, *, max_tokens: int | None = None, window: int = 256) -> tuple[list, list]:
    """The next-token loss sum (nats) and the predicted-token count of each window of ``text``.

    Parameters
    ----------
    loaded : toolkit.activations.Loaded
    text : str
    max_tokens, window
        As :func:`perplexity`.

    Returns
    -------
    (list of float, list of int)
        One entry per window, in order.
    """
    ids = loaded.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
    if max_tokens is not None:
        ids = ids[:max_tokens]
    device = next(loaded.model.parameters()).device
    losses, counts = [], []
    for start in range(0, len(ids) - 1, window):
        chunk = ids[start:start + window].unsqueeze(0).to(device)
        if chunk.shape[1] < 2:
            break
        logits = loaded.model(input_ids=chunk).logits
        loss, n = next_token_loss_sum(logits, chunk, torch.ones_like(chunk))
        losses.append(float(loss))
        counts.append(int(n))
    return losses, counts


def perplexity(loaded, text: str, *, max_tokens: int | None = None, window: int = 256) -> float:
    """Perplexity of ``loaded.model`` on ``text``: ``exp`` of the mean next-token loss over windows.

    Parameters
    ----------
    loaded : toolkit.activations.Loaded
        A model and its tokenizer (:func:`toolkit.activations.load_model`).
    text : str
    max_tokens : int, optional
        Use the first ``max_tokens`` tokens only (None: all).
    window : int, default 256
        Tokens per forward pass; each window starts with no context.

    Returns
    -------
    float
        The perplexity (1 is a perfect prediction; the vocabulary size is a uniform guess).
    """
    losses, counts = window_losses(loaded, text, max_tokens=max_tokens, window=window)
    return math.exp(sum(losses) / sum(counts))
