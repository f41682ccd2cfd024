"""Quantised safetensors checkpoints, dequantised on the fly one tensor at a time."""

from __future__ import annotations


def quantization_attrs(config: dict) -> dict:
    """``{"quantization": description}`` for a config with a ``quantization_config``, else ``{}``."""
    return {}
