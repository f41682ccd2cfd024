"""The declarative family adapter and the family registry.

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

from toolkit.architectures.base import Adapter, Extract
from toolkit.architectures.split import Split, check_component
from toolkit.architectures.vocabulary import ALL_COMPONENTS
from toolkit.constraint_types import Exempt
from toolkit.constraints import Flag, checks_options
from toolkit.errors import DuplicateRegistrationError, MappingError


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

    Every layer holds all of the family's components, each of the shape a
    llama-style block of the config's sizes has
    (:func:`~toolkit.architectures.expected.standard_shape`); a family whose
    blocks differ overrides :meth:`expected_shape` and :meth:`expected_components`.
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
        self._targets, self._fused_rows = {}, {}
        for module, target in self.modules.items():
            if isinstance(target, Split):
                for c in target.components:
                    check_component(c, module)
                self._fused_rows[module] = target.rows(self.dims, f"{self.family}: {module}")  # checked sizes
            else:
                check_component(target, module)
                self._targets[module] = [(target, module in self.transposed, None, None)]

    @property
    def components(self) -> tuple[str, ...]:
        have = {c for t in self.modules.values() for c in (t.components if isinstance(t, Split) else (t,))}
        return tuple(c for c in ALL_COMPONENTS if c in have)

    def _parts(self, module: str) -> list:
        """``[(component, transposed, index, fused rows)]`` of a module; a fused one's row indices are made on
        first use (after :meth:`check_stored` compared its stored rows with the declared ones)."""
        if module not in self._targets:
            rows, idx = self.modules[module].indices(self.dims, f"{self.family}: {module}")
            t = module in self.transposed
            self._targets[module] = [(c, t, idx[c], rows) for c in self.modules[module].components]
        return self._targets[module]

    def check_stored(self, name: str, shape: tuple[int, ...]) -> None:
        """A fused tensor's output rows must be those the config declares, checked before its row indices
        (one entry per declared row) are made.

        Raises
        ------
        MappingError
            Naming the parameter, its shape and the declared rows.
        """
        m = self._pattern.match(name)
        rows = self._fused_rows.get(m["module"]) if m is not None else None
        if rows is None or len(shape) != 2:
            return
        stored = shape[1] if m["module"] in self.transposed else shape[0]
        if stored != rows:
            raise MappingError(name, f"the config declares {rows} fused output rows but the stored tensor has shape "
                               f"{tuple(shape)}" + (" (stored (in, out))" if m["module"] in self.transposed else "")
                               + "; does the config belong to this checkpoint?")

    def expected_shape(self, piece):
        """The llama-style (out, in) of ``piece``'s component from the config's sizes."""
        from toolkit.architectures.expected import standard_shape

        return standard_shape(piece.component, self.dims)

    def expected_components(self, layer: int) -> tuple[str, ...]:
        """Every component of the family, in every layer."""
        return self.components

    def _match(self, name):
        m = self._pattern.match(name)
        if m is None:
            return None
        prefix = self.module_prefix.get(m["prefix"], m["prefix"])
        module_name = f"{prefix}{m['layers']}.{m['layer']}.{m['module']}"
        parts = [
            (c, Extract(name, transpose=t, index=idx, rows=rows), idx)
            for c, t, idx, rows in self._parts(m["module"])
        ]
        return int(m["layer"]), module_name, parts


# -- registry -----------------------------------------------------------------

_REGISTRY: dict[str, type[Adapter]] = {}


@checks_options(model_types=Exempt("the transformers model_type names the adapter reads (a definition; "
                                   "DuplicateRegistrationError for a name already registered)"), overwrite=Flag())
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


def family_adapter(model_type) -> type[Adapter] | None:
    """The adapter class registered for ``model_type``, or None (also for a ``model_type`` that is no str)."""
    return _REGISTRY.get(model_type) if isinstance(model_type, str) else None
