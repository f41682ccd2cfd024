"""Which modules a LoRA config adapts, and which rank and alpha each gets: ``peft``'s matching rules.

``target_modules`` and the per-module ``rank_pattern`` / ``alpha_pattern``
are matched against a module's name in the base model
(``model.layers.0.self_attn.q_proj``) as ``peft`` 0.21 matches them:

- ``target_modules`` (``peft.tuners.tuners_utils.check_target_module_exists``):
  a str is a regular expression the whole name must match (``"all-linear"``:
  every linear layer); a list matches a name equal to an entry or ending in
  ``"." + entry``, then restricted to ``layers_to_transform`` (the first
  ``<layers_pattern>.<i>.`` of the name); ``exclude_modules`` and
  ``modules_to_save`` take names out;
- the patterns (``peft.utils.other.get_pattern_key``): the first key ``k``
  for which the name matches ``(.*\\.)?(k)$``.

Everything is checked when the config is read, so a pattern that is no
regular expression, or a value that is no rank or alpha, is a typed error
naming the key, never an ``re.error`` or a ``TypeError`` from inside.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from toolkit.errors import CheckpointFileError
from toolkit.sources._common import shown

#: peft's shorthand for every linear layer (``peft.utils.constants.INCLUDE_LINEAR_LAYERS_SHORTHAND``).
ALL_LINEAR = "all-linear"
_FIX = "re-save the adapter with peft, or fix adapter_config.json"


def _regex(path: str, key: str, text, template: str = "{}") -> re.Pattern:
    """``re.compile(template.format(text))``, or a :class:`CheckpointFileError` naming ``key`` and ``text``."""
    if not isinstance(text, str):
        raise CheckpointFileError(path, f"{key} holds {shown(text)}, not a str (a module name or a regular "
                                  f"expression); {_FIX}")
    try:
        return re.compile(template.format(text))
    except (re.error, RecursionError, OverflowError) as exc:
        raise CheckpointFileError(path, f"{key} {shown(text)} is not a valid regular expression "
                                  f"({type(exc).__name__}: {exc}); peft cannot match module names with it: "
                                  f"{_FIX}") from None


def _names(path: str, key: str, value) -> tuple[str, ...] | None:
    """A list of module names (``target_modules``, ``exclude_modules``...) as a tuple of str; None when absent."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise CheckpointFileError(path, f"{key} is {shown(value)}, not a str or a list of module names; {_FIX}")
    return tuple(value)


def checked_patterns(path: str, key: str, raw, kind: str) -> dict:
    """``rank_pattern`` / ``alpha_pattern``: ``{regex key: value}``, each key compiled as peft uses it, each
    value a positive integer rank (``kind="rank"``) or a finite number (``kind="alpha"``).

    Raises
    ------
    CheckpointFileError
        Not a dict; a key that is no regular expression; a value of the wrong kind (``None``, a list,
        a rank of 0: ``peft`` refuses ``r <= 0``).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CheckpointFileError(path, f"{key} is {shown(raw)}, not a mapping of module patterns to values; {_FIX}")
    out = {}
    for name, value in raw.items():
        _regex(path, f"{key} key", name, r"(.*\.)?({})$")
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
        if kind == "rank":
            bad = bad or not isinstance(value, int) or value < 1
            what = "a positive integer rank (peft refuses r <= 0)"
        else:
            bad = bad or not math.isfinite(value)
            what = "a finite number"
        if bad:
            raise CheckpointFileError(path, f"{key}[{shown(name)}] is {shown(value)}, not {what}; {_FIX}")
        out[name] = value
    return out


def pattern_key(patterns, module: str) -> str | None:
    """The first key of ``patterns`` matching ``module`` as ``peft`` matches them, else None."""
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", module):
            return key
    return None


@dataclass(frozen=True)
class Targets:
    """The modules a LoRA config adapts (``target_modules`` and what narrows it), as ``peft`` matches them.

    Attributes
    ----------
    modules : str or tuple of str or None
        ``target_modules``: a regular expression, names, or None (not recorded: every module counts).
    exclude : str or tuple of str or None
        ``exclude_modules``.
    to_save : tuple of str
        ``modules_to_save`` (never adapted).
    layers : int or tuple of int or None
        ``layers_to_transform``.
    layers_pattern : tuple of str
        ``layers_pattern``.
    """

    modules: str | tuple[str, ...] | None = None
    exclude: str | tuple[str, ...] | None = None
    to_save: tuple[str, ...] = ()
    layers: int | tuple[int, ...] | None = None
    layers_pattern: tuple[str, ...] = ()

    @classmethod
    def read(cls, path: str, raw: dict) -> Targets:
        """The targets of an ``adapter_config.json``'s content.

        Raises
        ------
        CheckpointFileError
            A ``target_modules`` / ``exclude_modules`` that is no regular expression or list of names,
            a ``layers_to_transform`` that is no layer index or list of them.
        """
        found = {}
        for key in ("target_modules", "exclude_modules"):
            value = raw.get(key)
            if isinstance(value, str):
                if value.lower() != ALL_LINEAR or key != "target_modules":
                    _regex(path, key, value)
                found[key] = value
            else:
                found[key] = _names(path, key, value)
        layers = raw.get("layers_to_transform")
        if isinstance(layers, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
            layers = tuple(layers)
        elif layers is not None and (isinstance(layers, bool) or not isinstance(layers, int)):
            raise CheckpointFileError(path, f"layers_to_transform is {shown(layers)}, not a layer index or a list "
                                      f"of them; {_FIX}")
        to_save = _names(path, "modules_to_save", raw.get("modules_to_save")) or ()
        for m in to_save:
            _regex(path, "modules_to_save", m, r"(^|.*\.){}($|\..*)")
        pattern = raw.get("layers_pattern")
        pattern = (pattern,) if isinstance(pattern, str) else _names(path, "layers_pattern", pattern) or ()
        for p in pattern:
            _regex(path, "layers_pattern", p, r"(?:^|.*?\.){}\.(?P<idx>\d+)\.")
        return cls(found["target_modules"], found["exclude_modules"], to_save, layers, pattern)

    def adapts(self, module: str) -> bool:
        """Whether ``peft`` adapts the base model's module ``module`` (its full name) under this config."""
        if self._excluded(module):
            return False
        target = self.modules
        if target is None or (isinstance(target, str) and target.lower() == ALL_LINEAR):
            return True
        if isinstance(target, str):
            return re.fullmatch(target, module) is not None
        if module in target:
            return True
        if not any(module.endswith(f".{t}") for t in target):
            return False
        return self._in_layers(module)

    def _excluded(self, module: str) -> bool:
        ex = self.exclude
        if ex and (re.fullmatch(ex, module) if isinstance(ex, str) else
                   module in ex or any(module.endswith(f".{e}") for e in ex)):
            return True
        return any(re.match(rf"(^|.*\.){m}($|\..*)", module) for m in self.to_save)

    def _in_layers(self, module: str) -> bool:
        if self.layers is None or self.layers == ():
            return True
        match = None
        if not self.layers_pattern:
            match = re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", module)
        for pattern in self.layers_pattern:
            match = re.match(rf"(?:^|.*?\.){pattern}\.(?P<idx>\d+)\.", module)
            if match is not None:
                break
        if match is None:
            return False
        index = int(match["idx"])
        return index == self.layers if isinstance(self.layers, int) else index in self.layers
