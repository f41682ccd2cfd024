"""The quantisation methods read, by ``quant_method``, and how a config's quantisation is described.

Imports no source class, so :class:`toolkit.sources.Source` can describe a
quantised checkpoint from its config alone (:func:`quantization_attrs`).
"""

from __future__ import annotations

from toolkit.errors import UnsupportedQuantizationError


def _readers() -> dict:
    from toolkit.sources.quantized.compressed import compressed_format
    from toolkit.sources.quantized.fp8 import fp8_format
    from toolkit.sources.quantized.gptq import awq_format, gptq_format
    from toolkit.sources.quantized.mxfp4 import mxfp4_format

    return {"fp8": fp8_format, "gptq": gptq_format, "awq": awq_format, "compressed-tensors": compressed_format,
            "mxfp4": mxfp4_format}


#: The ``quant_method`` values read.
SUPPORTED = ("awq", "compressed-tensors", "fp8", "gptq", "mxfp4")


def raw_quantization_config(config: dict):
    """The ``quantization_config`` of a config (or of its ``text_config``) as written, None when there is none."""
    qc = config.get("quantization_config")
    if qc is None:
        text = config.get("text_config")
        qc = text.get("quantization_config") if isinstance(text, dict) else None
    return qc


def quantization_config(config: dict) -> dict | None:
    """The ``quantization_config`` of a config (or of its ``text_config``), None when there is none or it is
    no mapping (``"fp8"``, ``[]``: :func:`~toolkit.sources.quantized.source.quantized_source` then refuses
    quantised tensors)."""
    qc = raw_quantization_config(config)
    return qc if isinstance(qc, dict) else None


def reader_of(qc: dict, path: str):
    """``(Format, description)`` of a ``quantization_config`` by its ``quant_method``.

    Raises
    ------
    UnsupportedQuantizationError
        An unknown ``quant_method`` or a setting the method's reader does not read.
    """
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
    qc = quantization_config(config)
    return "" if qc is None else reader_of(qc, path)[1]


def quantization_attrs(config: dict) -> dict:
    """``{"quantization": description}`` for a quantised checkpoint's config, else ``{}`` (Dataset attrs)."""
    try:
        text = describe(config)
    except UnsupportedQuantizationError:
        return {}
    return {"quantization": text} if text else {}
