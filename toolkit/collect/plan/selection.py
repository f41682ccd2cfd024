"""Selecting part of a model: ``layers=``, ``components=``, ``experts=`` of every pass.

The same three keywords on ``weight_stats``, ``compare``, ``compare_series``,
``cell_spectrum``, ``activation_stats`` and the command line, in xarray's
idioms:

- ``layers``: an int, a slice, a range or a list of ints, as Python indexes
  the list of the model's layers (``-1`` is the last; ``slice(0, 28, 4)``
  is 0, 4, ..., 24, the stop excluded, like ``ds.isel(layer=...)``);
- ``components``: a name or a list of names as in the Dataset (``"attn.q"``,
  ``"mlp.router"``), or shell-style patterns (``"attn.*"``, ``"mlp.shared.*"``;
  ``"attn"`` and ``"mlp"`` alone mean every component of that group);
- ``experts``: as ``layers``, over the routed experts of the MoE layers (the
  other components are not affected).

:meth:`Selection.resolve` checks the selection against a plan (a name the
model does not have is a :class:`~toolkit.errors.SelectionError` listing
what it has) and :meth:`Selected.keeps` says which cells stay; only their
tensors are read.
"""

from __future__ import annotations

import fnmatch
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.errors import InvalidOptionError, SelectionError

__all__ = ["Selected", "Selection", "parse_index", "parse_names"]

_GROUPS = ("attn", "mlp")


def _index_spec(value, option: str, where: str):
    """``value`` as None, a slice, or a tuple of ints (type checks only)."""
    if value is None or isinstance(value, slice):
        if isinstance(value, slice) and not all(v is None or _is_int(v) for v in (value.start, value.stop,
                                                                                    value.step)):
            raise InvalidOptionError(option, value, "a slice of whole numbers, e.g. slice(0, 28, 4)", where)
        if isinstance(value, slice) and value.step == 0:
            raise InvalidOptionError(option, value, "a slice whose step is not 0", where)
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a 0-d array: its one value
        value = value.item()
    if _is_int(value):
        return (int(value),)
    if isinstance(value, range):
        if not value:
            raise InvalidOptionError(option, value, "an int, a slice, a non-empty range or a list of ints", where)
        return tuple(value)
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise InvalidOptionError(option, value, "an int, a slice, a range or a list of ints", where)
    items = list(value)
    if not items or not all(_is_int(v) for v in items):
        raise InvalidOptionError(option, value, "an int, a slice, a range or a non-empty list of ints", where)
    return tuple(int(v) for v in items)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _resolve_index(spec, count: int, option: str, what: str) -> tuple[int, ...] | None:
    """The sorted labels ``spec`` picks out of ``0 .. count - 1`` (None: all)."""
    if spec is None:
        return None
    if isinstance(spec, slice):
        picked = list(range(count))[spec]
        if not picked:
            raise SelectionError(option, spec, f"it selects none of the {count} {what} (0..{count - 1})")
        return tuple(sorted(picked))
    out = set()
    for i in spec:
        if not -count <= i < count:
            raise SelectionError(option, i, f"the model has {count} {what}: 0..{count - 1} (or -{count}..-1 "
                                 "from the end)")
        out.add(i % count)
    return tuple(sorted(out))


@dataclass(frozen=True)
class Selection:
    """What a pass is asked to measure (type-checked; :meth:`resolve` checks it against a model).

    Build with :meth:`of`; ``Selection()`` selects everything.
    """

    layers: object = None
    components: tuple[str, ...] | None = None
    experts: object = None

    @classmethod
    def of(cls, layers=None, components=None, experts=None, where: str = "") -> Selection:
        """Check the types of a selection (before any work).

        Raises
        ------
        InvalidOptionError
            A value of a type no selection takes (a float, a str for ``layers``, an empty list...).
        """
        if components is not None:
            given = components
            if isinstance(components, str):
                components = (components,)
            elif hasattr(components, "__iter__") and not isinstance(components, (bytes, Mapping)):
                components = tuple(components)
            else:
                raise InvalidOptionError("components", components, "a component name or a list of names, e.g. "
                                         "['attn.q', 'mlp.router'] or 'attn.*'", where)
            if not components or not all(isinstance(c, str) and c.strip() for c in components):
                bad = next((c for c in components if not (isinstance(c, str) and c.strip())), None)
                raise InvalidOptionError("components", given, "a non-empty list of component names" + (
                    f", each a non-empty str (not {bad!r})" if components else ""), where)
        return cls(_index_spec(layers, "layers", where), components, _index_spec(experts, "experts", where))

    @property
    def everything(self) -> bool:
        """Nothing is left out."""
        return self.layers is None and self.components is None and self.experts is None

    def resolve(self, num_layers: int, components, num_experts: int) -> Selected:
        """The concrete selection for a model.

        Parameters
        ----------
        num_layers : int
        components : iterable of str
            The components the model has (any order).
        num_experts : int
            Routed experts per MoE layer (0: not an MoE model).

        Raises
        ------
        SelectionError
            A layer or expert out of range, a component name or pattern the model does not have, or
            ``experts`` for a model without routed experts; the message lists what the model has.
        """
        from toolkit.architectures.vocabulary import ALL_COMPONENTS

        order = {c: i for i, c in enumerate(ALL_COMPONENTS)}
        have = sorted(set(components), key=lambda c: (order.get(c, len(order)), c))
        layers = _resolve_index(self.layers, num_layers, "layers", "layers")
        comps = None
        if self.components is not None:
            picked = set()
            for name in self.components:
                pattern = f"{name}.*" if name in _GROUPS else name
                found = fnmatch.filter(have, pattern)
                if not found:
                    known = "" if any(fnmatch.filter(ALL_COMPONENTS, pattern)) else "not a component name; "
                    raise SelectionError("components", name, f"{known}this model has {', '.join(have)} "
                                         "(patterns such as 'attn.*' select a group)")
                picked.update(found)
            comps = tuple(c for c in have if c in picked)
        experts = None
        if self.experts is not None:
            if not num_experts:
                raise SelectionError("experts", self.experts, "this model has no routed experts")
            experts = _resolve_index(self.experts, num_experts, "experts", "routed experts per layer")
        return Selected(layers, comps, experts)


@dataclass(frozen=True)
class Selected:
    """A selection resolved against a model: the layers, components and experts kept (None: all)."""

    layers: tuple[int, ...] | None = None
    components: tuple[str, ...] | None = None
    experts: tuple[int, ...] | None = None

    @property
    def everything(self) -> bool:
        return self.layers is None and self.components is None and self.experts is None

    def keeps(self, piece) -> bool:
        """Whether the cell ``piece`` (a :class:`~toolkit.architectures.base.Piece`) is selected."""
        return self.keeps_cell(piece.layer, piece.component) and (
            self.experts is None or piece.expert is None or piece.expert in self.experts)

    def keeps_cell(self, layer: int, component: str) -> bool:
        """Whether the (layer, component) cell is selected (for some expert, in an MoE layer)."""
        return ((self.layers is None or layer in self.layers)
                and (self.components is None or component in self.components))

    def describe(self) -> str:
        """``"layers 0, 4; components attn.q; experts 3"`` (the Dataset attr ``selection``); ``""`` for all."""
        parts = []
        for name, values in (("layers", self.layers), ("components", self.components), ("experts", self.experts)):
            if values is not None:
                parts.append(f"{name} {', '.join(map(str, values))}")
        return "; ".join(parts)


_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def _ascii_int(text: str, whole: str, option: str) -> int:
    """``text`` as an int when it is plain ASCII digits (an optional sign): not ``1_0``, not full-width digits,
    which Python's ``int`` would take."""
    if not _ASCII_INT.fullmatch(text):
        raise InvalidOptionError(option, whole, "an index (3, -1), a list (0,4,8) or a slice (0:28:4), written with "
                                 "the ASCII digits 0-9 only (no '_', no other scripts' digits)")
    return int(text)


def parse_index(text: str, option: str = "layers"):
    """A layer or expert selection written as text (the command line's ``--layers 0:28:4``).

    ``"3"`` -> 3, ``"-1"`` -> -1, ``"0:28:4"`` / ``":4"`` / ``"::-1"`` -> a slice,
    ``"0,4,8"`` -> ``[0, 4, 8]``. Each number is plain ASCII digits with an
    optional sign (``"1_0"`` and full-width ``"１"`` are refused, though Python's
    ``int`` takes them).

    Parameters
    ----------
    text : str
    option : str, default "layers"
        The option's name, for the message.

    Raises
    ------
    InvalidOptionError
        Text of none of these forms (a ``ValueError``; the message says which forms there are).
    """
    whole = str(text)
    parts = [t.strip() for t in whole.split(",")]
    if len(parts) > 1:
        return [_ascii_int(t, whole, option) for t in parts]
    if ":" in parts[0]:
        bounds = parts[0].split(":")
        if len(bounds) > 3:
            _ascii_int("", whole, option)
        return slice(*(_ascii_int(b.strip(), whole, option) if b.strip() else None for b in bounds))
    return _ascii_int(parts[0], whole, option)


def parse_names(text: str) -> list[str]:
    """Component names written as text (``--components attn.q,mlp.router``): a comma-separated list.

    Raises
    ------
    ValueError
        An empty name.
    """
    names = [t.strip() for t in str(text).split(",")]
    if not all(names):
        raise ValueError(f"{text!r} holds an empty name; write names separated by commas: attn.q,mlp.router")
    return names
