"""The declarative family adapter, the family registry and ``resolve_adapter``.

A family is one small class: the block container, the module path of each
component inside a block, the fused tensors with their split sizes declared
from the config, and which tensors are stored transposed. For example::

    @register_architecture("phi3")
    class Phi3Adapter(FamilyAdapter):
        modules = {
            "self_attn.qkv_proj": Split(("attn.q", "attn.k", "attn.v"),
                                        lambda d: (d.q_rows, d.kv_rows, d.kv_rows)),
            "self_attn.o_proj": "attn.o",
            "mlp.gate_up_proj": Split(("mlp.gate", "mlp.up"),
                                      lambda d: (d.intermediate_size,) * 2),
            "mlp.down_proj": "mlp.down",
        }
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from toolkit.architectures.base import Adapter, Dims, Extract
from toolkit.architectures.vocabulary import ALL_COMPONENTS
from toolkit.errors import DuplicateRegistrationError, MappingError, UnsupportedArchitectureError


@dataclass(frozen=True)
class Split:
    """How the output rows of a fused tensor are cut into components.

    The (out, in) matrix holds ``groups`` repeats of a block made of
    ``sizes[0]`` rows of ``components[0]``, then ``sizes[1]`` rows of
    ``components[1]``... With ``groups=1`` the components are contiguous
    (phi3 ``qkv_proj``: all of q, then k, then v); with ``groups=num_heads``
    they interleave per head (gpt_neox ``query_key_value``:
    ``[h0_q, h0_k, h0_v, h1_q, ...]``).

    Parameters
    ----------
    components : tuple of str
        Canonical components in storage order.
    sizes : sequence of int, or callable ``Dims -> sequence of int``
        Rows of each component within one group, from the config.
    groups : int, or callable ``Dims -> int``
        Number of repeats (default 1).
    """

    components: tuple[str, ...]
    sizes: Sequence[int] | Callable[[Dims], Sequence[int]]
    groups: int | Callable[[Dims], int] = 1

    def indices(self, dims: Dims, key: str = "") -> tuple[int, dict[str, object]]:
        """``(total_rows, {component: slice or LongTensor})`` for these sizes.

        Raises
        ------
        MappingError
            The config lacks a size the split needs, or a size is not positive.
        """
        try:
            sizes = [int(s) for s in (self.sizes(dims) if callable(self.sizes) else self.sizes)]
            groups = int(self.groups(dims) if callable(self.groups) else self.groups)
        except TypeError as e:  # a None size: the config lacks it
            raise MappingError(key, f"the config lacks a size this split needs ({dims}): {e}") from e
        except ArithmeticError as e:  # a zero head count (Dims refuses it; a hand-made Dims may not)
            raise MappingError(key, f"the config's sizes cannot give this split ({dims}): {e}") from e
        if len(sizes) != len(self.components) or min(sizes + [groups]) <= 0:
            raise MappingError(key, f"bad split sizes {sizes} x {groups} groups for {self.components}")
        block = sum(sizes)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        if groups == 1:
            out = {c: slice(s, s + n) for c, s, n in zip(self.components, starts, sizes, strict=True)}
        else:
            base = torch.arange(groups).unsqueeze(1) * block
            out = {
                c: (base + torch.arange(s, s + n)).reshape(-1)
                for c, s, n in zip(self.components, starts, sizes, strict=True)
            }
        return block * groups, out


def _check_component(comp: str, key: str) -> None:
    if comp not in ALL_COMPONENTS:
        raise MappingError(key, f"unknown component {comp!r}; components are {', '.join(ALL_COMPONENTS)}")


class FamilyAdapter(Adapter):
    """Declarative base of one architecture family.

    Subclass, set the class attributes, and decorate with
    :func:`register_architecture`. Parameter names are matched as
    ``{prefix}{layers}.{i}.{module}.weight``.

    Class attributes
    ----------------
    prefixes : tuple of str
        Accepted name prefixes before the block container, longest first
        (``("model.", "")``: with or without the task model's prefix).
    module_prefix : dict of str to str
        Stored prefix -> prefix of the same module in the loaded model, where
        ``transformers`` renames on load (gemma3:
        ``language_model.model.`` -> ``model.language_model.``).
    layers : str
        Dotted path of the block container (``layers``, ``h``, ``encoder.layer``).
    modules : dict of str to (str or Split)
        Module path inside a block -> canonical component, or a :class:`Split`.
    transposed : frozenset of str
        Module paths stored (in, out) (GPT-2 ``Conv1D``), transposed before any split.
    """

    prefixes: tuple[str, ...] = ("model.", "")
    module_prefix: dict[str, str] = {}
    layers: str = "layers"
    modules: dict[str, str | Split] = {}
    transposed: frozenset[str] = frozenset()

    def __init__(self, config: dict):
        super().__init__(config)
        mods = "|".join(re.escape(m) for m in sorted(self.modules, key=len, reverse=True))
        pre = "|".join(re.escape(p) for p in sorted(self.prefixes, key=len, reverse=True))
        self._pattern = re.compile(
            rf"^(?P<prefix>{pre})(?P<layers>{re.escape(self.layers)})\.(?P<layer>\d+)\.(?P<module>{mods})\.weight$"
        )
        self._targets = {}
        for module, target in self.modules.items():
            t = module in self.transposed
            if isinstance(target, Split):
                for c in target.components:
                    _check_component(c, module)
                rows, idx = target.indices(self.dims, f"{self.family}: {module}")
                self._targets[module] = [(c, t, idx[c], rows) for c in target.components]
            else:
                _check_component(target, module)
                self._targets[module] = [(target, t, None, None)]

    @property
    def components(self) -> tuple[str, ...]:
        have = {c for parts in self._targets.values() for c, *_ in parts}
        return tuple(c for c in ALL_COMPONENTS if c in have)

    def _match(self, name):
        m = self._pattern.match(name)
        if m is None:
            return None
        prefix = self.module_prefix.get(m["prefix"], m["prefix"])
        module_name = f"{prefix}{m['layers']}.{m['layer']}.{m['module']}"
        parts = [
            (c, Extract(name, transpose=t, index=idx, rows=rows), idx)
            for c, t, idx, rows in self._targets[m["module"]]
        ]
        return int(m["layer"]), module_name, parts


# -- registry -----------------------------------------------------------------

_REGISTRY: dict[str, type[Adapter]] = {}


def register_architecture(*model_types: str, overwrite: bool = False):
    """Class decorator: register an adapter class for config ``model_type`` values.

    Parameters
    ----------
    *model_types : str
        ``model_type`` values of ``transformers`` configs (``"llama"``,
        ``"mistral"``...) the class handles.
    overwrite : bool
        Replace a class already registered for one of them (default False).

    Returns
    -------
    callable
        The decorator; it returns the class unchanged.

    Raises
    ------
    DuplicateRegistrationError
        A ``model_type`` is already registered and ``overwrite`` is False.
        Nothing is registered then.

    Examples
    --------
    >>> @register_architecture("my_llama")            # doctest: +SKIP
    ... class MyLlama(FamilyAdapter):
    ...     modules = {"attn.wq": "attn.q", ...}
    """
    if not model_types or not all(isinstance(t, str) and t for t in model_types):
        raise TypeError("register_architecture needs one or more model_type strings")

    def deco(cls: type[Adapter]) -> type[Adapter]:
        if not overwrite:
            for t in model_types:
                if t in _REGISTRY and _REGISTRY[t] is not cls:
                    old = _REGISTRY[t]
                    raise DuplicateRegistrationError("architecture", t, old, f"by {old.__module__}.{old.__qualname__}")
        for t in model_types:
            _REGISTRY[t] = cls
        return cls

    return deco


def registered_architectures() -> dict[str, type[Adapter]]:
    """``{model_type: adapter class}`` of every registered family (a copy)."""
    return dict(sorted(_REGISTRY.items()))


def resolve_adapter(config: dict, parameter_names: Sequence[str] = (), mapping=None) -> Adapter:
    """The adapter for a checkpoint, from its config (or from a user mapping).

    Parameters
    ----------
    config : dict
        The ``transformers`` config as a dict; ``model_type`` picks the family.
    parameter_names : sequence of str
        Every stored parameter name; used for the error message and, when the
        config has no layer count, to count the layers.
    mapping : Mapping or dict, optional
        A user :class:`~toolkit.architectures.Mapping` (a plain dict is
        turned into one); it wins over the registered family.

    Returns
    -------
    Adapter

    Raises
    ------
    UnsupportedArchitectureError
        No mapping given and no family registered for ``model_type``; the
        message lists the parameter names and how to pass a mapping.
    MappingError
        A declared split needs a size the config lacks, a size of the config
        is not a positive integer, or ``config`` is not a dict.

    Notes
    -----
    It does not check the layer count: call :meth:`Adapter.check_layers`
    with the layers of every piece once all names are mapped.

    Examples
    --------
    >>> cfg = {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 32,
    ...        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}
    >>> a = resolve_adapter(cfg, [])
    >>> [(p.component, p.out_index) for p in a.pieces("model.layers.1.self_attn.qkv_proj.weight")]
    [('attn.q', slice(0, 32, None)), ('attn.k', slice(32, 48, None)), ('attn.v', slice(48, 64, None))]
    """
    from collections.abc import Mapping as AbcMapping

    from toolkit.architectures.mapping import Mapping

    if not isinstance(config, AbcMapping):
        raise MappingError("config", f"the config must be a dict (a config.json's content), not a "
                           f"{type(config).__name__}; pass {{}} when there is none")
    if mapping is not None:
        if not isinstance(mapping, Mapping):
            mapping = Mapping(dict(mapping))
        adapter = mapping.adapter(config)
    else:
        model_type = config.get("model_type")
        cls = _REGISTRY.get(model_type) if isinstance(model_type, str) else None
        if cls is None:
            raise UnsupportedArchitectureError(model_type, _REGISTRY, list(parameter_names))
        adapter = cls(config)
    if adapter.num_layers is None:
        layers = [p.layer for n in parameter_names for p in adapter.pieces(n)]
        adapter.num_layers = max(layers) + 1 if layers else 0
    return adapter
