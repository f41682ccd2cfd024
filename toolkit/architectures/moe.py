"""Mixture-of-experts families: routed experts, the router and shared experts.

An MoE block replaces the MLP by E routed experts (each a gated MLP), a
router (a linear map hidden -> E scores) and, in some families, shared
experts every token goes through. Each routed expert's matrices are the
cells ``(layer, component, expert)`` of the grid (``Piece.expert``); the
router is the component ``mlp.router``, the shared expert's matrices
``mlp.shared.up`` / ``mlp.shared.down`` / ``mlp.shared.gate``. Attention and
the dense MLP of the layers that have one keep their llama names.

Storage layouts, from ``transformers`` 5 (``modeling_<family>.py`` and
``conversion_mapping.py``):

- per-expert 2-D tensors, as hub checkpoints (and ``save_pretrained``) store
  them: Mixtral ``block_sparse_moe.experts.{e}.w1/w2/w3`` (w1 = gate,
  w3 = up, w2 = down; the sources rename ``block_sparse_moe`` to ``mlp`` as
  ``transformers`` does), Qwen2-MoE / Qwen3-MoE / OLMoE / DeepSeek
  ``mlp.experts.{e}.gate_proj/up_proj/down_proj``, each (out, in);
- the 3-D stack ``transformers`` builds on load (and GGUF files are read
  into): ``mlp.experts.gate_up_proj`` (E, 2·I, hidden), gate rows first
  (``MixtralExperts.forward``: ``linear(x, gate_up_proj[e]).chunk(2, -1)``),
  and ``mlp.experts.down_proj`` (E, hidden, I);
- gpt-oss: ``mlp.experts.gate_up_proj`` (E, hidden, 2·I) stored (in, out)
  with gate and up *interleaved* along the last axis
  (``GptOssExperts._apply_gate``: ``gate_up[..., ::2], gate_up[..., 1::2]``),
  and ``down_proj`` (E, I, hidden) stored (in, out); their biases are no
  components.

The layout of each stacked tensor is declared per family (:class:`Stacked`),
never guessed from its shape; the expert count and the expert's
intermediate size come from the config and are checked against the stored
shape when the matrix is cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.architectures.adapter import FamilyAdapter, register_architecture
from toolkit.architectures.base import Extract, Piece
from toolkit.architectures.llama import LLAMA_MODULES
from toolkit.architectures.vocabulary import ALL_COMPONENTS
from toolkit.errors import MappingError

__all__ = ["MoEAdapter", "Stacked", "class_defaults", "qwen_sparse_layer"]


@dataclass(frozen=True)
class Stacked:
    """How one 3-D tensor (E, ...) holds a matrix of every routed expert.

    Parameters
    ----------
    components : tuple of str
        The components each expert's matrix holds, in storage order (one,
        or ``("mlp.gate", "mlp.up")`` for a fused gate/up).
    transposed : bool
        Each expert is stored (in, out) (gpt-oss); transposed to (out, in) first.
    interleaved : bool
        The components alternate row by row (gpt-oss ``gate_up_proj``:
        gate, up, gate, up...) instead of lying in consecutive blocks.
    """

    components: tuple[str, ...]
    transposed: bool = False
    interleaved: bool = False


#: ``transformers`` 5's in-memory layout of routed experts (also what its GGUF loader builds).
FUSED_EXPERTS = {
    "mlp.experts.gate_up_proj": Stacked(("mlp.gate", "mlp.up")),
    "mlp.experts.down_proj": Stacked(("mlp.down",)),
}
#: Per-expert module names of the Qwen / OLMoE / DeepSeek checkpoints.
SWIGLU_EXPERT = {"gate_proj": "mlp.gate", "up_proj": "mlp.up", "down_proj": "mlp.down"}
#: Attention of the llama family (every MoE family here but DeepSeek's latent attention).
LLAMA_ATTENTION = {k: v for k, v in LLAMA_MODULES.items() if k.startswith("self_attn.")}


class MoEAdapter(FamilyAdapter):
    """Declarative base of a mixture-of-experts family.

    Class attributes (besides :class:`FamilyAdapter`'s, whose ``modules`` map
    attention, the dense MLP, the router and the shared experts)
    ----------------------------------------------------------------------
    num_experts_keys : tuple of str
        Config keys of the number of routed experts, first present wins.
    expert_size_key : str
        Config key of one expert's intermediate size.
    expert_modules : dict of str to dict
        Per-expert 2-D tensors ``{container}.{e}.{module}.weight``:
        container path in a block -> {module: component}.
    expert_module_name : str
        Path in a block of the module ``transformers`` loads the experts into.
    stacked : dict of str to Stacked
        3-D tensors named ``{layers}.{i}.{path}`` (no ``.weight``) -> layout.
    """

    num_experts_keys: tuple[str, ...] = ("num_experts", "num_local_experts")
    expert_size_key: str = "moe_intermediate_size"
    expert_modules: dict[str, dict[str, str]] = {}
    expert_module_name: str = "mlp.experts"
    stacked: dict[str, Stacked] = FUSED_EXPERTS

    def __init__(self, config: dict):
        super().__init__(config)
        pre = "|".join(re.escape(p) for p in sorted(self.prefixes, key=len, reverse=True))
        head = rf"^(?P<prefix>{pre})(?P<layers>{re.escape(self.layers)})\.(?P<layer>\d+)\."
        self._per_expert = [
            (re.compile(head + rf"{re.escape(c)}\.(?P<expert>\d+)\.(?P<module>"
                        + "|".join(re.escape(m) for m in sorted(mods, key=len, reverse=True)) + r")\.weight$"), mods)
            for c, mods in self.expert_modules.items()
        ]
        paths = "|".join(re.escape(p) for p in sorted(self.stacked, key=len, reverse=True))
        self._stack = re.compile(head + rf"(?P<path>{paths})$") if self.stacked else None

    @property
    def components(self) -> tuple[str, ...]:
        have = set(super().components) | {c for m in self.expert_modules.values() for c in m.values()}
        have |= {c for s in self.stacked.values() for c in s.components}
        return tuple(c for c in ALL_COMPONENTS if c in have)

    def config_int(self, *keys: str) -> tuple[str, int]:
        """``(key, value)`` of the first of ``keys`` the config (or its ``text_config``) holds.

        A key the config lacks has the default of ``transformers``' config
        class for the ``model_type``, the value the model ``transformers``
        builds from this config has (a GGUF file's derived config lacks the
        expert sizes: ``transformers``' GGUF tables do not map
        ``expert_feed_forward_length``); the stored shapes are checked
        against it when a matrix is cut.

        Raises
        ------
        MappingError
            None of them is there nor has a default, or the value is not a positive integer.
        """
        from toolkit.config_keys import text_config

        cfg = {**self.config, **text_config(self.config)}
        found = [(k, cfg[k]) for k in keys if cfg.get(k) is not None]  # the config's own keys first
        if not found:
            defaults = class_defaults(self.config.get("model_type"))
            found = [(k, defaults[k]) for k in keys if defaults.get(k) is not None]
        for key, value in found[:1]:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise MappingError(f"config {key}", f"the config declares {key}={value!r}, not a positive integer; "
                                   "fix the config (or use the config.json published with these weights)")
            return key, value
        raise MappingError(f"config of {self.family}", f"the config lacks {' / '.join(keys)}, which the routed "
                           "experts need; use the config.json published with these weights")

    def optional_int(self, key: str) -> int | None:
        """The config's (or its ``text_config``'s) ``key`` when it is a positive integer, else None."""
        value = self.config_value(key)
        return value if _whole(value) and value > 0 else None

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer, from the config."""
        return self.config_int(*self.num_experts_keys)[1]

    def pieces(self, name: str) -> list[Piece]:
        """As :meth:`Adapter.pieces`; a routed expert's pieces carry ``expert``, sorted by component then expert.

        Raises
        ------
        MappingError
            An expert index the config's expert count does not have; the
            config lacks the expert count or the expert size a stack needs.
        """
        for pattern, mods in self._per_expert:
            m = pattern.match(name)
            if m is not None:
                expert = int(m["expert"])
                key, count = self.config_int(*self.num_experts_keys)
                if expert >= count:
                    raise MappingError(name, f"expert {expert}, but the config declares {key}={count} routed "
                                       "experts; does the config belong to this checkpoint?")
                return [Piece(int(m["layer"]), mods[m["module"]], name, Extract(name), expert=expert,
                              module_name=self._expert_module(m))]
        m = self._stack.match(name) if self._stack is not None else None
        if m is None:
            return super().pieces(name)
        return self._stack_pieces(name, m)

    def check_stored(self, name: str, shape: tuple[int, ...]) -> None:
        """A stack of experts must be 3-D with the config's expert count first, checked before a piece per
        expert is made (a declared count of 10^7 over a stack of 4 made 10^7 pieces first).

        Raises
        ------
        MappingError
            Naming the stack, its shape and the count the config declares.
        """
        super().check_stored(name, shape)
        m = self._stack.match(name) if self._stack is not None else None
        if m is None:
            return
        key, count = self.config_int(*self.num_experts_keys)
        if len(shape) != 3 or shape[0] != count:
            raise MappingError(name, f"the config declares {key}={count} routed experts, but the stored stack has "
                               f"shape {tuple(shape)} (experts first); does the config belong to this checkpoint?")

    #: Components of the routed experts, the router and the shared experts of a sparse layer.
    _EXPERTS = ("mlp.up", "mlp.down", "mlp.gate")
    _SHARED = ("mlp.shared.up", "mlp.shared.down", "mlp.shared.gate")

    def config_problems(self) -> list[str]:
        """The router's settings: ``num_experts_per_tok`` between 1 and the expert count (``topk`` of more
        experts than there are, or of none, fails inside the forward pass)."""
        key, count = self.config_int(*self.num_experts_keys)
        used = self.config_value("num_experts_per_tok")
        if used is not None and (not _whole(used) or not 1 <= used <= count):
            return [f"num_experts_per_tok={used!r} experts per token, not between 1 and the {count} routed experts "
                    f"({key})"]
        return []

    def config_value(self, key: str):
        """The config's (or its ``text_config``'s) ``key``, None when absent."""
        from toolkit.config_keys import text_config

        return text_config(self.config).get(key, self.config.get(key))

    def sparse_layer(self, layer: int) -> bool | None:
        """Whether ``layer`` holds routed experts (True for a family whose every layer does, the default);
        None when the config's say cannot be read."""
        return True

    def has_shared_expert(self) -> bool:
        """Whether a sparse layer holds shared experts (``mlp.shared.*``); False by default."""
        return False

    def shared_size(self) -> int | None:
        """The intermediate size of a sparse layer's shared experts (None: not checked)."""
        return None

    def dense_size(self) -> int | None:
        """The intermediate size of a dense layer's MLP (``intermediate_size`` by default)."""
        return self.dims.intermediate_size

    def expected_components(self, layer: int) -> tuple[str, ...] | None:
        """Attention in every layer; routed experts, the router (and the shared experts) in a sparse
        layer, the dense MLP in the others (:meth:`sparse_layer`)."""
        attention = tuple(c for c in self.components if c.startswith("attn."))
        sparse = self.sparse_layer(layer)
        if sparse is None:
            return attention
        if not sparse:
            return attention + self._EXPERTS
        return attention + self._EXPERTS + ("mlp.router",) + (self._SHARED if self.has_shared_expert() else ())

    def expected_shape(self, piece: Piece):
        """Attention as a llama block's; a routed expert's MLP of the expert size, the router (experts,
        hidden), the shared experts of :meth:`shared_size`, a dense MLP of :meth:`dense_size`."""
        from toolkit.architectures.expected import Expected, standard_shape

        comp = piece.component
        if comp.startswith("attn."):
            return standard_shape(comp, self.dims)
        if comp == "mlp.router":
            key, count = self.config_int(*self.num_experts_keys)
            return Expected(count, self.dims.hidden_size, f"{key}, hidden_size")
        if piece.expert is not None:
            key, size = self.config_int(self.expert_size_key)
            found = standard_shape(comp, self.dims, size)
            return Expected(found.rows, found.cols, f"{key}, hidden_size")
        if comp.startswith("mlp.shared."):
            size = self.shared_size()
            return None if size is None else standard_shape(comp.replace("shared.", ""), self.dims, size)
        size = self.dense_size()
        return None if size is None else standard_shape(comp, self.dims, size)

    def _expert_module(self, m) -> str:
        prefix = self.module_prefix.get(m["prefix"], m["prefix"])
        return f"{prefix}{m['layers']}.{m['layer']}.{self.expert_module_name}"

    def _stack_pieces(self, name: str, m) -> list[Piece]:
        """Every expert's pieces of a 3-D stack (each ``Extract`` picks its expert first)."""
        layout = self.stacked[m["path"]]
        count = self.num_experts
        parts = len(layout.components)
        if parts == 1:
            rows, cuts = self.dims.hidden_size, [None]
            if rows is None:
                raise MappingError(name, "the config lacks hidden_size, the rows of each expert's down projection")
        else:
            size = self.config_int(self.expert_size_key)[1]
            rows = parts * size
            cuts = ([slice(i, rows, parts) for i in range(parts)] if layout.interleaved
                    else [slice(i * size, (i + 1) * size) for i in range(parts)])
        out = []
        for comp, cut in sorted(zip(layout.components, cuts, strict=True), key=lambda p: ALL_COMPONENTS.index(p[0])):
            out += [Piece(int(m["layer"]), comp, name,
                          Extract(name, transpose=layout.transposed, index=cut, rows=rows, expert=e),
                          module_name=self._expert_module(m), expert=e) for e in range(count)]
        return out


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def qwen_config_problems(adapter: MoEAdapter) -> list[str]:
    """Qwen2-MoE's and Qwen3-MoE's layer settings: ``decoder_sparse_step`` a positive integer (``(layer + 1) %
    decoder_sparse_step`` divides by it), ``mlp_only_layers`` a list of layer indices."""
    step, only = adapter.config_value("decoder_sparse_step"), adapter.config_value("mlp_only_layers")
    found = MoEAdapter.config_problems(adapter)
    if step is not None and (not _whole(step) or step < 1):
        found.append(f"decoder_sparse_step={step!r}, not a positive integer (every how many layers one is sparse)")
    if only is not None and not (isinstance(only, list) and all(_whole(i) for i in only)):
        found.append(f"mlp_only_layers={only!r}, not a list of layer indices")
    return found


def qwen_sparse_layer(adapter: MoEAdapter, layer: int) -> bool | None:
    """Qwen2-MoE's and Qwen3-MoE's rule: ``layer not in mlp_only_layers and num_experts > 0 and
    (layer + 1) % decoder_sparse_step == 0``; None where those settings are not a list and a positive integer."""
    from toolkit.config_keys import text_config

    cfg = text_config(adapter.config)
    only, step = cfg.get("mlp_only_layers") or [], cfg.get("decoder_sparse_step", 1)
    if not isinstance(only, list) or not isinstance(step, int) or isinstance(step, bool) or step < 1:
        return None
    return layer not in only and (layer + 1) % step == 0


def class_defaults(model_type) -> dict:
    """The defaults of ``transformers``' config class for ``model_type`` (``{}`` when unknown)."""
    try:
        from transformers import AutoConfig

        return AutoConfig.for_model(model_type).to_dict() if isinstance(model_type, str) else {}
    except (ImportError, ValueError, KeyError, TypeError):
        return {}


MIXTRAL_EXPERT = {"w1": "mlp.gate", "w3": "mlp.up", "w2": "mlp.down"}


@register_architecture("mixtral")
class MixtralAdapter(MoEAdapter):
    """Mixtral: every layer is MoE, no shared expert, router ``block_sparse_moe.gate`` (loaded as ``mlp.gate``)."""

    modules = {**LLAMA_ATTENTION, "mlp.gate": "mlp.router", "block_sparse_moe.gate": "mlp.router"}
    num_experts_keys = ("num_local_experts",)
    expert_size_key = "intermediate_size"
    expert_modules = {"mlp.experts": MIXTRAL_EXPERT, "block_sparse_moe.experts": MIXTRAL_EXPERT}


@register_architecture("qwen2_moe")
class Qwen2MoeAdapter(MoEAdapter):
    """Qwen2-MoE: routed experts, router ``mlp.gate``, one shared expert ``mlp.shared_expert``.

    Layers in ``mlp_only_layers`` or off the ``decoder_sparse_step`` keep a
    dense ``mlp.{gate,up,down}_proj`` (dense cells). ``mlp.shared_expert_gate``
    (1, hidden: the sigmoid weight of the shared expert's output per token) is
    a vector, not a matrix the metrics describe, and no component.
    """

    modules = {**LLAMA_MODULES, "mlp.gate": "mlp.router", "mlp.shared_expert.up_proj": "mlp.shared.up",
               "mlp.shared_expert.down_proj": "mlp.shared.down", "mlp.shared_expert.gate_proj": "mlp.shared.gate"}
    expert_modules = {"mlp.experts": SWIGLU_EXPERT}

    def config_problems(self) -> list[str]:
        return qwen_config_problems(self)

    def sparse_layer(self, layer: int) -> bool | None:
        """``Qwen2MoeDecoderLayer``'s rule: not in ``mlp_only_layers``, experts, and ``(layer + 1) %
        decoder_sparse_step == 0``."""
        return qwen_sparse_layer(self, layer)

    def has_shared_expert(self) -> bool:
        return (self.shared_size() or 0) > 0

    def shared_size(self) -> int | None:
        return self.optional_int("shared_expert_intermediate_size")


@register_architecture("qwen3_moe")
class Qwen3MoeAdapter(MoEAdapter):
    """Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): routed experts and router, no shared expert."""

    modules = {**LLAMA_MODULES, "mlp.gate": "mlp.router"}
    expert_modules = {"mlp.experts": SWIGLU_EXPERT}

    def config_problems(self) -> list[str]:
        return qwen_config_problems(self)

    def sparse_layer(self, layer: int) -> bool | None:
        """``Qwen3MoeDecoderLayer``'s rule (as Qwen2-MoE's)."""
        return qwen_sparse_layer(self, layer)


@register_architecture("olmoe")
class OlmoeAdapter(Qwen3MoeAdapter):
    """OLMoE: as Qwen3-MoE, the expert size is ``intermediate_size``."""

    expert_size_key = "intermediate_size"

    def sparse_layer(self, layer: int) -> bool | None:
        """Every OLMoE layer is sparse."""
        return True


GPT_OSS_EXPERTS = {
    "mlp.experts.gate_up_proj": Stacked(("mlp.gate", "mlp.up"), transposed=True, interleaved=True),
    "mlp.experts.down_proj": Stacked(("mlp.down",), transposed=True),
}


@register_architecture("gpt_oss")
class GptOssAdapter(MoEAdapter):
    """gpt-oss in its bf16 / float layout: stacked, transposed, interleaved experts; router ``mlp.router``."""

    modules = {**LLAMA_ATTENTION, "mlp.router": "mlp.router"}
    num_experts_keys = ("num_local_experts",)
    expert_size_key = "intermediate_size"
    stacked = GPT_OSS_EXPERTS


LLAMA4_EXPERTS = {
    "feed_forward.experts.gate_up_proj": Stacked(("mlp.gate", "mlp.up"), transposed=True),
    "feed_forward.experts.down_proj": Stacked(("mlp.down",), transposed=True),
}


@register_architecture("llama4", "llama4_text")
class Llama4Adapter(MoEAdapter):
    """Llama 4 (Scout, Maverick), multimodal or text-only.

    ``Llama4TextExperts``: ``gate_up_proj`` (E, hidden, 2·I) stored (in, out),
    ``forward``: ``gate, up = bmm(x, gate_up_proj).chunk(2, dim=-1)`` (gate
    columns first, not interleaved), ``down_proj`` (E, I, hidden) (in, out);
    router ``feed_forward.router``, one shared expert
    ``feed_forward.shared_expert``; layers outside ``moe_layers`` hold a dense
    ``feed_forward.{gate,up,down}_proj``. The multimodal checkpoint stores the
    text blocks under ``language_model.model.`` (loaded as
    ``model.language_model.``) beside a vision model that has no cells.
    """

    prefixes = ("model.language_model.", "language_model.model.", "language_model.", "model.", "")
    module_prefix = {"language_model.model.": "model.language_model.", "language_model.": "model.language_model."}
    modules = {**LLAMA_ATTENTION, "feed_forward.gate_proj": "mlp.gate", "feed_forward.up_proj": "mlp.up",
               "feed_forward.down_proj": "mlp.down", "feed_forward.router": "mlp.router",
               "feed_forward.shared_expert.gate_proj": "mlp.shared.gate",
               "feed_forward.shared_expert.up_proj": "mlp.shared.up",
               "feed_forward.shared_expert.down_proj": "mlp.shared.down"}
    num_experts_keys = ("num_local_experts",)
    expert_size_key = "intermediate_size"
    expert_module_name = "feed_forward.experts"
    stacked = LLAMA4_EXPERTS

    def sparse_layer(self, layer: int) -> bool | None:
        """``layer in moe_layers`` (``Llama4TextDecoderLayer.is_moe_layer``); None when the config lists none."""
        from toolkit.config_keys import text_config

        layers = text_config(self.config).get("moe_layers")
        if not isinstance(layers, list):
            return None
        return layer in layers

    def has_shared_expert(self) -> bool:
        return True

    def shared_size(self) -> int | None:
        return self.dims.intermediate_size  # Llama4TextMoe.shared_expert = Llama4TextMLP(config)

    def dense_size(self) -> int | None:
        return self.optional_int("intermediate_size_mlp")  # Llama4TextMLP of a dense layer
