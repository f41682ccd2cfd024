"""Cache ids of stored tensors and of the cells cut from them.

An id names everything about the cell that changes its numbers besides the
bytes (which the cache namespace covers, :attr:`toolkit.collect.plan.types.Plan.value_identity`):
the stored tensor's name, storage dtype and shape, and how the cell is cut
from it (layer, component, transposition, the rows of a fused split and the
fused size the config declares).
"""

from __future__ import annotations

import torch

from toolkit.architectures.base import Extract, Piece
from toolkit.collect.cache import digest


def encode_index(index):
    """A slice or index tensor as JSON: ``None``, ``{"slice": [start, stop, step]}`` or ``{"rows": [...]}``."""
    if index is None:
        return None
    if isinstance(index, slice):
        return {"slice": [index.start, index.stop, index.step]}
    return {"rows": [int(i) for i in torch.as_tensor(index).tolist()]}


def decode_index(raw):
    """The inverse of :func:`encode_index`."""
    if raw is None:
        return None
    if "slice" in raw:
        return slice(*raw["slice"])
    return torch.tensor(raw["rows"], dtype=torch.long)


def record_id(record) -> str:
    """``name|dtype|shape`` of a :class:`~toolkit.sources.TensorRecord`."""
    return f"{record.name}|{record.dtype}|{tuple(record.shape)}"


def cut_id(piece: Piece) -> str:
    """How ``piece`` is cut from its stored tensor."""
    e = piece.extract
    how = ([bool(e.transpose), encode_index(e.index), e.rows] if isinstance(e, Extract)
           else [type(e).__module__, type(e).__qualname__, repr(e)])
    if isinstance(e, Extract) and e.expert is not None:
        how.append(["expert", e.expert])
    expert = "" if piece.expert is None else f"|expert={piece.expert}"
    return f"{piece.layer}|{piece.component}{expert}|{digest(how)[:16]}"
