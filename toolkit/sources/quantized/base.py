"""The contract of a quantisation layout: :class:`Format`, filled by each method's module.

:mod:`.fp8`, :mod:`.gptq`, :mod:`.compressed` and :mod:`.mxfp4` each build a
:class:`Format` from a ``quantization_config``; :class:`~toolkit.sources.quantized.source.QuantizedSource`
reads a checkpoint through it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Format:
    """One quantisation format, as :class:`QuantizedSource` uses it.

    Attributes
    ----------
    method : str
        The ``quant_method`` (and layout) it reads, for messages.
    pattern : re.Pattern
        Matches a stored name as ``(?P<prefix>...)`` + separator + ``(?P<part>...)``.
    primary : str
        The part whose presence makes a group quantised (``weight_scale_inv``, ``qweight``...).
    required : tuple of str
        Parts a quantised group must have.
    output : callable
        ``output(prefix) -> str``: the name of the dequantised parameter.
    shape : callable
        ``shape(parts, prefix) -> tuple``: its shape from the parts' records (may read tiny tensors).
    dequantize : callable
        ``dequantize(parts, prefix) -> torch.Tensor`` from the parts' read tensors: float32, that shape.
    dtype : str
        The record's ``dtype`` label (``"fp8_e4m3 128x128"``, ``"gptq int4"``...).
    stacked : tuple of str
        Parts whose first dimension is the first dimension of a 3-D
        parameter (the expert of an expert stack), so that rows ``a:b`` of
        them dequantise to rows ``a:b`` of the parameter; ``dequantize``
        needs only these. Empty (the default): a parameter is read whole.
    check : callable
        ``check(parts, prefix) -> str``: what is wrong with the parts' records
        (their shapes and dtypes against each other and the config; may read
        tiny tensors), ``""`` when nothing is. Run when the checkpoint is
        opened, before ``shape`` and long before any allocation, so every
        dimension ``dequantize`` will use is one the stored shapes hold.
    """

    method: str
    pattern: re.Pattern
    primary: str
    required: tuple[str, ...]
    output: Callable[[str], str]
    shape: Callable[[dict], tuple]
    dequantize: Callable[[dict], torch.Tensor]
    dtype: str
    stacked: tuple[str, ...] = ()
    check: Callable[[dict, str], str] = lambda parts, prefix: ""


def shape_of(record) -> tuple[int, ...]:
    """A part's stored shape as a tuple (for the checks and their messages)."""
    return tuple(int(d) for d in record.shape)
