"""``adapter_config.json`` of a PEFT LoRA adapter: rank, scaling and the per-module patterns.

The scaling follows ``peft`` (``peft.tuners.lora.layer.LoraLayer.update_layer``):
``s = lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with ``use_rslora``
(Kalajdzievski 2023), with ``r`` and ``lora_alpha`` of a module taken from
``rank_pattern`` / ``alpha_pattern`` when a pattern matches its name, as
``peft.utils.other.get_pattern_key`` matches them (:mod:`.targets`). Every
setting is checked when the file is read: a pattern that is no regular
expression, a rank of 0, an alpha that is no number is refused there, naming
the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import read_json, shown
from toolkit.sources.lora.targets import Targets, checked_patterns, pattern_key

CONFIG_NAME = "adapter_config.json"
#: Settings of ``adapter_config.json`` that change the merged weights in ways not read here.
_REFUSED = {
    "lora_bias": "a bias on lora_B (lora_bias=True)",
    "use_qalora": "QA-LoRA's pooled inputs (use_qalora=True)",
    "use_bdlora": "block-diagonal LoRA (use_bdlora)",
}


@dataclass(frozen=True)
class AdapterConfig:
    """What a LoRA adapter's config says about the update ΔW = s · B · A of each module.

    Attributes
    ----------
    path : str
        The ``adapter_config.json`` read.
    r : int
        Default rank.
    lora_alpha : float
        Default alpha.
    use_rslora : bool
        Scaling ``alpha / sqrt(r)`` instead of ``alpha / r``.
    use_dora : bool
        Weight-decomposed LoRA (Liu et al. 2024): the merged weight is rescaled
        per output row by the stored magnitude, so ΔW depends on the base.
    fan_in_fan_out : bool
        The config's flag that the adapted weights are stored (in, out) (GPT-2
        ``Conv1D``). ``peft`` follows it only for ``Conv1D`` modules: it sets
        it per module type (:meth:`toolkit.sources.lora.AdapterSource`).
    rank_pattern, alpha_pattern : dict
        Module-name pattern -> rank / alpha.
    base_model : str
        ``base_model_name_or_path`` (``""`` when absent).
    targets : Targets
        ``target_modules`` and what narrows it (:class:`~toolkit.sources.lora.targets.Targets`).
    """

    path: str
    r: int
    lora_alpha: float
    use_rslora: bool = False
    use_dora: bool = False
    fan_in_fan_out: bool = False
    rank_pattern: dict = field(default_factory=dict)
    alpha_pattern: dict = field(default_factory=dict)
    base_model: str = ""
    targets: Targets = field(default_factory=Targets)

    @classmethod
    def read(cls, folder: Path) -> AdapterConfig:
        """Read and check ``folder / adapter_config.json``.

        Raises
        ------
        CheckpointFileError
            Not JSON; ``peft_type`` other than ``LORA``; ``r`` not a positive
            integer or ``lora_alpha`` not a finite number; a ``rank_pattern`` /
            ``alpha_pattern`` / ``target_modules`` key that is no regular
            expression or a value of the wrong kind (``None``, a list, a rank
            of 0); a setting that changes the merged weights in a way not read
            here (``lora_bias``, QA-LoRA).
        """
        path = folder / CONFIG_NAME
        raw = read_json(path, "adapter config")
        kind = str(raw.get("peft_type", "LORA")).upper()
        if kind != "LORA":
            raise CheckpointFileError(
                path, f"peft_type {kind!r} is not LoRA; only LoRA adapters (peft_type LORA, incl. rsLoRA and DoRA) "
                "are read. Merge the adapter into the base with peft (merge_and_unload) and open the merged model",
            )
        for key, what in _REFUSED.items():
            if raw.get(key):
                raise CheckpointFileError(
                    path, f"{what} changes the merged weights in a way this toolkit does not read; merge the adapter "
                    "with peft (merge_and_unload), save the merged model and compare that",
                )
        r, alpha = raw.get("r"), raw.get("lora_alpha")
        if not isinstance(r, int) or isinstance(r, bool) or r < 1 or not isinstance(alpha, (int, float)) \
                or isinstance(alpha, bool) or not math.isfinite(alpha):
            raise CheckpointFileError(path, f"r={shown(r)}, lora_alpha={shown(alpha)}: expected a positive integer "
                                            "rank and a finite number; re-save the adapter with peft")
        where = str(path)
        return cls(where, r, float(alpha), bool(raw.get("use_rslora")), bool(raw.get("use_dora")),
                   bool(raw.get("fan_in_fan_out")),
                   checked_patterns(where, "rank_pattern", raw.get("rank_pattern"), "rank"),
                   checked_patterns(where, "alpha_pattern", raw.get("alpha_pattern"), "alpha"),
                   str(raw.get("base_model_name_or_path") or ""), Targets.read(where, raw))

    def rank(self, module: str) -> int:
        """The rank ``peft`` gives ``module`` (``rank_pattern``, else ``r``)."""
        key = pattern_key(self.rank_pattern, module)
        return int(self.rank_pattern[key]) if key is not None else self.r

    def alpha(self, module: str) -> float:
        """The alpha ``peft`` gives ``module`` (``alpha_pattern``, else ``lora_alpha``)."""
        key = pattern_key(self.alpha_pattern, module)
        return float(self.alpha_pattern[key]) if key is not None else self.lora_alpha

    def scale(self, module: str) -> float:
        """s = alpha / r, or alpha / sqrt(r) with ``use_rslora`` (Kalajdzievski 2023, eq. 1)."""
        r = self.rank(module)
        return self.alpha(module) / (math.sqrt(r) if self.use_rslora else r)

    def method(self) -> str:
        """``"lora"``, ``"rslora"``, ``"dora"`` or ``"rslora+dora"``, for the Dataset attrs."""
        parts = (["rslora"] if self.use_rslora else []) + (["dora"] if self.use_dora else [])
        return "+".join(parts) or "lora"
