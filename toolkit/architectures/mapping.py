"""User mappings: components of a checkpoint no registered family knows."""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Mapping as AbcMapping

from toolkit.architectures.base import Adapter, Extract
from toolkit.architectures.split import Split, check_component
from toolkit.architectures.vocabulary import COMPONENTS
from toolkit.errors import MappingError


class Mapping:
    """Your own parameter-name -> component mapping.

    Each regular expression must match a whole stored parameter name and
    capture the layer index in its first group (or a group named ``layer``).

    Parameters
    ----------
    patterns : dict of str to str
        ``{component: regex}`` for tensors that hold one component, e.g.
        ``{"attn.q": r"blocks\\.(\\d+)\\.attn\\.wq\\.weight"}``. Components are
        those of :data:`toolkit.COMPONENTS`; leave out the ones your model lacks.
    transpose : iterable of str, optional
        Components (keys of ``patterns``) or fused patterns (keys of ``fused``)
        whose tensors are stored (in, out), like GPT-2's ``Conv1D``; they are
        transposed to (out, in) before any split.
    fused : dict of str to Split, optional
        ``{regex: Split(components, sizes, groups=1)}`` for tensors holding
        several components stacked along the output rows. ``sizes`` are ints or
        a function of :class:`~toolkit.architectures.base.Dims` (sizes read
        from the config), never guessed from the tensor's shape.
    num_layers : int, optional
        Number of blocks, when the config has no ``num_hidden_layers``
        (default: the config's, else counted from the names).
    name : str
        Shown as the adapter's ``family`` (default ``"custom"``).

    Raises
    ------
    MappingError
        An unknown component, a pattern that does not compile or captures no
        layer group, an entry of ``transpose`` that names no pattern, or an
        argument of the wrong type (patterns that are not a dict of strings,
        a ``num_layers`` that is not a positive integer...).

    Examples
    --------
    >>> m = Mapping(
    ...     {"attn.o": r"blocks\\.(\\d+)\\.wo\\.weight", "mlp.up": r"blocks\\.(\\d+)\\.w1\\.weight"},
    ...     fused={r"blocks\\.(\\d+)\\.wqkv\\.weight": Split(("attn.q", "attn.k", "attn.v"), (64, 16, 16))},
    ... )
    >>> [p.component for p in m.adapter({}).pieces("blocks.3.wqkv.weight")]
    ['attn.q', 'attn.k', 'attn.v']
    """

    def __init__(
        self,
        patterns: dict[str, str],
        *,
        transpose: Iterable[str] = (),
        fused: dict[str, Split] | None = None,
        num_layers: int | None = None,
        name: str = "custom",
    ):
        if not isinstance(patterns, AbcMapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in patterns.items()):
            raise MappingError(
                "patterns", f"patterns must be a dict {{component: regex}} of strings, not {_short(patterns)}; e.g. "
                "Mapping({'attn.q': r'blocks\\.(\\d+)\\.wq\\.weight'})",
            )
        if fused is not None and (not isinstance(fused, AbcMapping) or not all(isinstance(k, str) for k in fused)):
            raise MappingError("fused", f"fused must be a dict {{regex: Split(...)}}, not {_short(fused)}")
        if isinstance(transpose, str):  # one name, not its characters
            transpose = (transpose,)
        try:
            transpose = frozenset(transpose)
        except TypeError as exc:
            raise MappingError("transpose", f"transpose must be a list of components or patterns, not "
                               f"{_short(transpose)}") from exc
        if not all(isinstance(t, str) for t in transpose):
            raise MappingError("transpose", f"transpose must hold strings, not {_short(sorted(map(repr, transpose)))}")
        if num_layers is not None and (isinstance(num_layers, bool) or not isinstance(num_layers, int)
                                       or num_layers <= 0):
            raise MappingError("num_layers", f"num_layers must be a positive integer or None, not {num_layers!r}")
        if not isinstance(name, str):
            raise MappingError("name", f"name must be a str, not {_short(name)}")
        self.patterns = dict(patterns)
        self.fused = dict(fused or {})
        self.transpose = transpose
        self.num_layers = num_layers
        self.name = name
        self._rules = []  # (compiled, target, transpose, key)
        for comp, rx in self.patterns.items():
            check_component(comp, comp)
            self._rules.append((_compile(rx, comp), comp, comp in self.transpose or rx in self.transpose, comp))
        for rx, split in self.fused.items():
            if not isinstance(split, Split):
                raise MappingError(rx, f"a fused pattern needs a Split(...), got {type(split).__name__}")
            for c in split.components:
                check_component(c, rx)
            self._rules.append((_compile(rx, rx), split, rx in self.transpose, rx))
        unknown = self.transpose - set(self.patterns) - set(self.fused) - {
            rx for rx in self.patterns.values()
        }
        if unknown:
            raise MappingError(
                sorted(unknown)[0], "transpose names neither a component of `patterns` nor a `fused` pattern"
            )

    def adapter(self, config: dict) -> MappingAdapter:
        """Build the adapter for one checkpoint's config."""
        return MappingAdapter(self, config)

    def __repr__(self) -> str:
        keys = [*self.patterns, *(f"fused:{k}" for k in self.fused)]
        return f"Mapping({self.name!r}, {keys})"


def _short(value) -> str:
    text = repr(value)
    return f"a {type(value).__name__} ({text if len(text) <= 60 else text[:57] + '...'})"


def _compile(rx: str, key: str) -> re.Pattern:
    try:
        pat = re.compile(rx)
    except re.error as e:
        raise MappingError(key, f"bad regular expression {rx!r}: {e}") from e
    if pat.groups < 1:
        raise MappingError(key, f"the pattern {rx!r} needs a capture group for the layer index, like (\\d+)")
    return pat


class MappingAdapter(Adapter):
    """The adapter a :class:`Mapping` builds; ``module_name`` is the parameter
    name without its ``.weight`` suffix."""

    def __init__(self, mapping: Mapping, config: dict):
        super().__init__(config)
        self.mapping = mapping
        self.family = mapping.name
        if mapping.num_layers is not None:
            self.num_layers = int(mapping.num_layers)
        self._rules = []
        for pat, target, t, key in mapping._rules:
            if isinstance(target, Split):
                rows, idx = target.indices(self.dims, key)
                self._rules.append((pat, [(c, t, idx[c], rows) for c in target.components], key))
            else:
                self._rules.append((pat, [(target, t, None, None)], key))

    @property
    def components(self) -> tuple[str, ...]:
        have = {c for _, parts, _ in self._rules for c, *_ in parts}
        return tuple(c for c in COMPONENTS if c in have)

    def _match(self, name):
        hits = [(m, parts, key) for pat, parts, key in self._rules if (m := pat.fullmatch(name))]
        if not hits:
            return None
        if len(hits) > 1:
            raise MappingError(name, f"matches several patterns of the mapping: {[k for _, _, k in hits]}")
        m, parts, _ = hits[0]
        layer = m.group("layer") if "layer" in m.re.groupindex else m.group(1)
        try:
            layer = int(layer)
        except (TypeError, ValueError):
            raise MappingError(name, f"the layer group captured {layer!r}, not an integer") from None
        module_name = name[: -len(".weight")] if name.endswith(".weight") else name
        return layer, module_name, [(c, Extract(name, t, idx, rows), idx) for c, t, idx, rows in parts]
