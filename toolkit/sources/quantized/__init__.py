"""Quantised safetensors checkpoints, dequantised on the fly one tensor at a time.

A checkpoint whose ``config.json`` has a ``quantization_config`` is opened
as usual and then wrapped (:func:`quantized_source`) by the reader of its
``quant_method``:

======================  ==============================================  =====================
``quant_method``        stored                                          module
======================  ==============================================  =====================
``fp8``                 float8 e4m3 + ``weight_scale_inv`` per block    :mod:`.fp8`
``gptq``                ``qweight``/``qzeros``/``scales``/``g_idx``     :mod:`.gptq`
``awq``                 ``qweight``/``qzeros``/``scales`` (GEMM)        :mod:`.gptq`
``compressed-tensors``  float-, int- and pack-quantized                 :mod:`.compressed`
``mxfp4``               ``*_blocks`` + ``*_scales`` (gpt-oss experts)   :mod:`.mxfp4`
======================  ==============================================  =====================

Each quantised parameter is yielded under its unquantised name and shape,
so architectures, ``weight_stats`` and ``compare`` (a quantised release
against its original: the quantisation error per cell) need nothing else.
The Dataset attr ``quantization`` gives the stored format in words.

:mod:`.methods` knows the methods and describes a config's quantisation;
:mod:`.source` reads a checkpoint through a method's :class:`~.base.Format`.
"""

from __future__ import annotations

from toolkit.sources.quantized.methods import SUPPORTED, describe, quantization_attrs
from toolkit.sources.quantized.source import quantized_source

__all__ = ["SUPPORTED", "describe", "quantized_source", "quantization_attrs"]
