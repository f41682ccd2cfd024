"""Unpacking b-bit integers from int32 words, as the GPTQ, AWQ and compressed-tensors formats pack them.

Every format here puts value k of a word at bits ``k·b .. k·b + b − 1``
(least significant first); they differ in the dimension packed and, for
AWQ, in the order of the values within a word.
"""

from __future__ import annotations

import torch


def unpack(packed: torch.Tensor, bits: int, dim: int, order: list[int] | None = None) -> torch.Tensor:
    """The unsigned b-bit values of int32 words, ``32 // bits`` per word, along ``dim``.

    Parameters
    ----------
    packed : torch.Tensor, int32, 2-D
    bits : int
        2, 4 or 8 (values never straddle two words).
    dim : int
        0: the words pack consecutive rows (GPTQ ``qweight``); 1: consecutive columns.
    order : list of int, optional
        ``order[i]`` = the position within its word's group of the value held
        at bits ``i·b`` (AWQ: ``[0, 2, 4, 6, 1, 3, 5, 7]``); default ``0, 1, ...``.

    Returns
    -------
    torch.Tensor, int64
        ``packed.shape`` with dimension ``dim`` multiplied by ``32 // bits``.
    """
    per = 32 // bits
    words = packed.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, bits, dtype=torch.int64)
    values = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # (R, C, per): value at bits i*b
    if order is not None:
        inverse = [order.index(k) for k in range(per)]
        values = values[..., inverse]
    if dim == 1:
        return values.reshape(packed.shape[0], packed.shape[1] * per)
    return values.permute(0, 2, 1).reshape(packed.shape[0] * per, packed.shape[1])


def unpack_dense(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """compressed-tensors' dense packing along the last dim: element i of a row at global bit i·b
    of the row's words (values may straddle words), unsigned, int64, shape (rows, count)."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    start = torch.arange(count, dtype=torch.int64) * bits
    word, offset = start // 32, start % 32
    low = words[:, word] >> offset
    nxt = torch.clamp(word + 1, max=words.shape[1] - 1)
    high = torch.where(offset + bits > 32, words[:, nxt] << (32 - offset), torch.zeros_like(low))
    return (low | high) & ((1 << bits) - 1)
