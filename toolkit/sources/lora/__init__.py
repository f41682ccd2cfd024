"""PEFT LoRA adapters as sources: ΔW = s · B · A per adapted module, and a base with the adapter merged.

``open_source(adapter_folder)`` returns an :class:`AdapterSource` (format
``"lora"``); ``toolkit.weight_stats`` measures ΔW from it and
``toolkit.compare(base, adapter)`` compares the base with base + ΔW
(:class:`MergedSource`). See :mod:`toolkit.sources.lora.source`.

References
----------
Hu, E. J. et al. (2021). LoRA: Low-Rank Adaptation of Large Language Models. arXiv:2106.09685.
Kalajdzievski, D. (2023). A Rank Stabilization Scaling Factor for Fine-Tuning with LoRA. arXiv:2312.03732.
Liu, S.-Y. et al. (2024). DoRA: Weight-Decomposed Low-Rank Adaptation. arXiv:2402.09353.
"""

from __future__ import annotations

import os

from toolkit.sources.lora.config import AdapterConfig
from toolkit.sources.lora.delta import DeltaRecord, Factors, LowRankDelta, MergedRecord
from toolkit.sources.lora.source import AdapterSource, MergedSource, is_adapter_folder

__all__ = ["AdapterConfig", "AdapterSource", "DeltaRecord", "Factors", "LowRankDelta", "MergedRecord",
           "MergedSource", "is_adapter_folder", "open_adapter"]


def open_adapter(folder: str | os.PathLike, *, base: str | os.PathLike | None = None) -> AdapterSource:
    """Open a LoRA adapter folder, its architecture taken from ``base`` (default: its
    ``base_model_name_or_path``). See :class:`AdapterSource` for what it raises.

    Examples
    --------
    >>> src = open_adapter("runs/lora", base="HuggingFaceTB/SmolLM2-135M")   # doctest: +SKIP
    >>> ds = toolkit.weight_stats(src)                                        # doctest: +SKIP
    """
    return AdapterSource(folder, base=base)
