"""Scales (and zero points) of blocks of a matrix, spread over its entries without allocating more than it.

A scale grid of shape (⌈R / b₀⌉, ⌈C / b₁⌉) gives entry (i, j) of an R × C
matrix the scale at (i // b₀, j // b₁). Spreading it by indexing (not by
``repeat_interleave``, whose output is the padded b₀·⌈R/b₀⌉ × b₁·⌈C/b₁⌉ grid)
costs one R × C tensor whatever the block sizes a config declares: a block of
2³⁰ rows over a matrix of 32 rows is one block, not a 2³⁰-row allocation.
"""

from __future__ import annotations

import torch

__all__ = ["grid_shape", "spread"]


def grid_shape(rows: int, cols: int, block: tuple[int, int]) -> tuple[int, int]:
    """``(⌈rows / b₀⌉, ⌈cols / b₁⌉)``: the scales a block grid holds (integer arithmetic only)."""
    return -(-rows // block[0]), -(-cols // block[1])


def spread(t: torch.Tensor, rows: int, cols: int, block: tuple[int, int]) -> torch.Tensor:
    """The (..., rows, cols) tensor whose entry (i, j) is ``t[..., i // b₀, j // b₁]``.

    Parameters
    ----------
    t : torch.Tensor, shape (..., ⌈rows / b₀⌉, ⌈cols / b₁⌉)
    rows, cols : int
    block : (int, int)
        ``(b₀, b₁)``, positive.

    Returns
    -------
    torch.Tensor
        Shape ``(*t.shape[:-2], rows, cols)``, dtype of ``t``; the only tensor of that size made.
    """
    r = torch.arange(rows) // block[0]
    c = torch.arange(cols) // block[1]
    return t[..., r, :][..., c]
