"""One routed expert of a stacked (E, ...) expert tensor, as a record of its own.

A 3-D expert tensor (gpt-oss ``mlp.experts.gate_up_proj``, E x hidden x
2·I) read whole costs E expert matrices of memory. Where the format reads
part of a tensor (``TensorRecord._row_reader``: safetensors, whose rows along
the first dimension are the experts), :func:`expert_slice` gives a record
per expert that reads only that expert's bytes, so a pass over the stack
holds one expert matrix at a time. Its name is the stack's name followed by
:data:`SEPARATOR` and the expert index; :func:`find_record` resolves such a
name against an opened source's records (a Dask worker, a cached plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import torch

from toolkit.sources.base import TensorRecord

__all__ = ["SEPARATOR", "expert_slice", "find_record", "sliceable"]

#: Between a stack's name and the expert index in an expert slice's name.
SEPARATOR = "#expert="


def sliceable(record: TensorRecord) -> bool:
    """True when ``record`` is a 3-D tensor whose format reads one expert (first index) at a time."""
    return record.can_read_rows and len(record.shape) == 3


def _one(row_reader, expert: int) -> torch.Tensor:
    block = row_reader(expert, expert + 1)
    return block[0]


def expert_slice(record: TensorRecord, expert: int) -> TensorRecord:
    """The record of ``record[expert]``, reading only that expert's bytes.

    Parameters
    ----------
    record : TensorRecord
        A 3-D stack of experts, shape (E, a, b), from a format that reads
        rows (:func:`sliceable`).
    expert : int
        0 <= expert < E.

    Returns
    -------
    TensorRecord
        Named ``f"{record.name}{SEPARATOR}{expert}"``, shape (a, b), the
        storage dtype; ``read()`` equals ``record.read()[expert]``.

    Raises
    ------
    ValueError
        ``record`` is not sliceable, or ``expert`` is out of range.
    """
    if not sliceable(record) or not 0 <= expert < record.shape[0]:
        raise ValueError(f"no expert {expert} can be read alone from {record.name!r} (shape {record.shape})")
    return TensorRecord(f"{record.name}{SEPARATOR}{expert}", tuple(record.shape[1:]), record.dtype,
                        partial(_one, record._row_reader, expert), file=record.file,
                        stored_name=record.stored_name)


def find_record(records: Mapping[str, TensorRecord], name: str) -> TensorRecord | None:
    """The record called ``name`` among ``records`` (``{name: record}`` of a source), an expert
    slice's name included; None when there is none."""
    if name in records:
        return records[name]
    stack, sep, index = name.rpartition(SEPARATOR)
    if not sep or not index.isdigit() or stack not in records:
        return None
    try:
        return expert_slice(records[stack], int(index))
    except ValueError:
        return None
