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
"""

from __future__ import annotations

from toolkit.errors import UnsupportedQuantizationError
from toolkit.sources.base import Source

__all__ = ["SUPPORTED", "describe", "quantized_source", "quantization_attrs"]


def _readers() -> dict:
    from toolkit.sources.quantized.compressed import compressed_format
    from toolkit.sources.quantized.fp8 import fp8_format
    from toolkit.sources.quantized.gptq import awq_format, gptq_format
    from toolkit.sources.quantized.mxfp4 import mxfp4_format

    return {"fp8": fp8_format, "gptq": gptq_format, "awq": awq_format, "compressed-tensors": compressed_format,
            "mxfp4": mxfp4_format}


#: The ``quant_method`` values read.
SUPPORTED = ("awq", "compressed-tensors", "fp8", "gptq", "mxfp4")


def _config(config: dict) -> dict | None:
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, dict) else None
    return qc if isinstance(qc, dict) else None


def _reader(qc: dict, path: str):
    method = str(qc.get("quant_method", "")).lower()
    readers = _readers()
    if method not in readers:
        raise UnsupportedQuantizationError(
            path, method or "(no quant_method)", SUPPORTED, "this quantisation method is not read (bitsandbytes, "
            "hqq, torchao... quantise at load time or store layouts this toolkit does not unpack); open the "
            "unquantised checkpoint instead",
        )
    return readers[method](qc, path)


def describe(config: dict, path: str = "config.json") -> str:
    """The stored format of a config's ``quantization_config`` in words (``""`` when there is none).

    Raises
    ------
    UnsupportedQuantizationError
        An unknown ``quant_method`` or a setting (bits, layout) that is not read.
    """
    qc = _config(config)
    return "" if qc is None else _reader(qc, path)[1]


def quantization_attrs(config: dict) -> dict:
    """``{"quantization": description}`` for a quantised checkpoint's config, else ``{}`` (Dataset attrs)."""
    try:
        text = describe(config)
    except UnsupportedQuantizationError:
        return {}
    return {"quantization": text} if text else {}


def quantized_source(src: Source) -> Source:
    """``src`` with its quantised tensors dequantised on read, or ``src`` itself when its config
    has no ``quantization_config``.

    Raises
    ------
    UnsupportedQuantizationError
        An unknown ``quant_method`` or bit width (naming it and listing :data:`SUPPORTED`),
        or stored tensors that do not fit the method's layout.
    """
    qc = _config(src.config)
    if qc is None or src.format not in ("safetensors", "pytorch"):
        return src
    from toolkit.sources.quantized.base import QuantizedSource

    path = src.files()[0] if src.files() else src.location
    fmt, description = _reader(qc, path)
    return QuantizedSource(src, fmt, description)
