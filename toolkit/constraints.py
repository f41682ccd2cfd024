"""Option constraints declared as data on each public function, checked at the front door.

A public function says what each of its options takes with :func:`checks_options`
(scikit-learn's ``validate_params`` in spirit)::

    @checks_options(source=SOURCE, keep_spectra=Flag(), precision=OneOf(("float64", "float32")))
    def weight_stats(source=None, *, keep_spectra=False, precision="float64"): ...

Every parameter is declared, the total contract: an option by what it takes, and a parameter that is no option
(the checkpoint, a definition handed to a registry, keywords passed on) by :class:`Exempt` with the typed
error that refuses a bad value. The contract test asserts that the declared names equal the signature's (as
scikit-learn's ``test_public_functions.py`` does), so a new parameter cannot slip past; the constraints on the
data, matplotlib objects and keywords live in :mod:`toolkit.constraint_types`.

Before the body runs, every option the caller passed is checked by its
constraint and replaced by the value the function uses (``numpy.int64(3)``
becomes ``3``); a bad value raises one
:class:`~toolkit.errors.InvalidOptionError` naming the function, the option,
the value and what it takes: the one message shape of every front door. The
constraints stay on the function (:func:`declared_options`), so one contract
test feeds every declared option of every public function a value it refuses
(:meth:`Constraint.invalid`) and expects that error before any work.

Each constraint is a small frozen record with ``check(value, option, where)``
(the value to use, or the error) and ``invalid()`` (a value it refuses); the
checks themselves are the plain functions of :mod:`toolkit.options`.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from toolkit import options
from toolkit.errors import InvalidOptionError

__all__ = [
    "Check", "Constraint", "DeviceName", "Exempt", "Flag", "Forwarded", "Function", "MetricNames", "Names", "OneOf",
    "Optional", "PathName", "Progress", "Real", "Size", "Text", "Whole", "checks_options", "declared_options",
    "is_exempt",
]

_ATTRIBUTE = "__toolkit_options__"


class Constraint:
    """What one option takes: :meth:`check` returns the value to use or raises
    :class:`~toolkit.errors.InvalidOptionError`; :meth:`invalid` is a value it refuses."""

    def check(self, value, option: str, where: str):  # pragma: no cover - the protocol
        raise NotImplementedError

    def invalid(self):  # pragma: no cover - the protocol
        raise NotImplementedError


@dataclass(frozen=True)
class Flag(Constraint):
    """``True`` or ``False`` (a NumPy bool too); ``"no"`` or ``0`` are refused, not read as truth values."""

    def check(self, value, option, where):
        return options.flag(value, option, where)

    def invalid(self):
        return "no"


@dataclass(frozen=True)
class OneOf(Constraint):
    """One of the strings ``choices``."""

    choices: tuple[str, ...]

    def check(self, value, option, where):
        return options.choice(value, option, where, self.choices)

    def invalid(self):
        return "bogus"


@dataclass(frozen=True)
class Whole(Constraint):
    """A whole number (not a bool, not a float) in ``[minimum, maximum]``; ``meaning`` ends the message."""

    minimum: int | None = None
    maximum: int | None = None
    meaning: str = ""

    def check(self, value, option, where):
        return options.whole_number(value, option, where, minimum=self.minimum, maximum=self.maximum,
                                    meaning=self.meaning)

    def invalid(self):
        return self.minimum - 1 if self.minimum is not None else 2.5


@dataclass(frozen=True)
class Real(Constraint):
    """A finite real number ``>= minimum`` (or ``> above``) and ``<= maximum``."""

    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    meaning: str = ""

    def check(self, value, option, where):
        return options.real_number(value, option, where, minimum=self.minimum, above=self.above,
                                   maximum=self.maximum, meaning=self.meaning)

    def invalid(self):
        return float("nan")


@dataclass(frozen=True)
class Text(Constraint):
    """A non-empty str; ``meaning`` says what it names (``"a branch, tag or commit"``)."""

    meaning: str = ""
    empty: bool = False

    def check(self, value, option, where):
        if not isinstance(value, str) or not (value or self.empty):
            raise InvalidOptionError(option, value, ("a str" if self.empty else "a non-empty str")
                                     + (f" ({self.meaning})" if self.meaning else ""), where)
        return value

    def invalid(self):
        return 42


@dataclass(frozen=True)
class PathName(Constraint):
    """A path: a str or an ``os.PathLike`` (whether it exists is the function's to say)."""

    def check(self, value, option, where):
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value:
            how = "; bytes: pass os.fsdecode(path)" if isinstance(value, (bytes, bytearray)) else ""
            raise InvalidOptionError(option, value, f"a path (a non-empty str or a pathlib.Path{how})", where)
        return value

    def invalid(self):
        return 42


@dataclass(frozen=True)
class Names(Constraint):
    """A str or a non-empty list of str (names of series, panels, labels)."""

    meaning: str = ""

    def check(self, value, option, where):
        names = [value] if isinstance(value, str) else value
        if isinstance(value, (bytes, dict)) or not hasattr(names, "__iter__") or not (
                names := list(names)) or not all(isinstance(n, str) for n in names):
            raise InvalidOptionError(option, value, "a str or a non-empty list of str"
                                     + (f" ({self.meaning})" if self.meaning else ""), where)
        return value

    def invalid(self):
        return [1, 2]


@dataclass(frozen=True)
class Size(Constraint):
    """A figure size ``(width, height)`` in inches: two finite numbers > 0."""

    def check(self, value, option, where):
        try:
            w, h = (float(x) for x in value)
            ok = not isinstance(value, (str, bytes)) and all(math.isfinite(x) and x > 0 for x in (w, h))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InvalidOptionError(option, value, "(width, height) in inches, two numbers > 0", where)
        return value

    def invalid(self):
        return (0, 3)


@dataclass(frozen=True)
class Function(Constraint):
    """A callable; ``signature`` says how it is called, ``what`` what it is (for the message)."""

    signature: str = ""
    what: str = "a callable"

    def check(self, value, option, where):
        if not callable(value):
            raise InvalidOptionError(option, value, self.what + (f" {self.signature}" if self.signature else ""),
                                     where)
        return value

    def invalid(self):
        return 42


@dataclass(frozen=True)
class Optional(Constraint):
    """None, or what ``inner`` takes."""

    inner: Constraint

    def check(self, value, option, where):
        if value is None:
            return None
        try:
            return self.inner.check(value, option, where)
        except InvalidOptionError as e:
            raise InvalidOptionError(option, value, f"None or {e.expected}", where) from None

    def invalid(self):
        return self.inner.invalid()


@dataclass(frozen=True)
class Progress(Constraint):
    """``progress``: a bool (None: False) or a callable ``progress(done, total, name)``."""

    def check(self, value, option, where):
        return options.progress_option(value, where)

    def invalid(self):
        return "yes"


@dataclass(frozen=True)
class MetricNames(Constraint):
    """``metrics``: None (every metric of ``kind``), a name or a non-empty list of names, each a non-empty str;
    with ``resolve`` (the registry's ``resolve_metrics(names, kind)``), an unknown name is an
    :class:`~toolkit.errors.UnknownMetricError` naming the function, the option and the close matches."""

    kind: str
    resolve: Callable | None = None

    def check(self, value, option, where):
        from toolkit.errors import UnknownMetricError

        value = options.metric_names(value, where, self.kind)
        names = [value] if isinstance(value, str) else value or []
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise InvalidOptionError(option, value, f"None (every {self.kind} metric), a name or a list of "
                                         f"names, each a non-empty str (not {name!r})", where)
        if self.resolve is not None and value is not None:
            try:
                self.resolve(value, self.kind)
            except UnknownMetricError as e:
                raise UnknownMetricError(e.name, e.known, kind=e.kind, others=e._others, option=option,
                                         where=where) from None
        return value

    def invalid(self):
        return []


@dataclass(frozen=True)
class DeviceName(Constraint):
    """A device name torch knows, of a type the work runs on (``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"``;
    a ``torch.device``); whether this process has it is checked where the work starts."""

    def check(self, value, option, where):
        from toolkit.devices import check_device

        check_device(value, available=False, option=option, where=where)
        return value

    def invalid(self):
        return 42


@dataclass(frozen=True)
class Check(Constraint):
    """A checker of :mod:`toolkit.options` (or an object's own), ``check(value, where)``, and a value it refuses.

    For options whose rule belongs to a record of their own (``fit`` to :class:`~toolkit.FitOptions`, the
    selection to :class:`~toolkit.collect.plan.selection.Selection`).
    """

    checker: Callable
    refused: object

    def check(self, value, option, where):
        return self.checker(value, where)

    def invalid(self):
        return self.refused


@dataclass(frozen=True)
class Exempt(Constraint):
    """A parameter that is no option, taken as given: ``reason`` says which typed error refuses a bad value
    (or why none can be wrong). Declared on the function, so the contract test knows it was considered."""

    reason: str

    def check(self, value, option, where):
        return value

    def invalid(self):
        return None


def is_exempt(constraint: Constraint) -> bool:
    """Whether ``constraint`` exempts its parameter (no value of it is refused at the front door)."""
    return isinstance(constraint, Exempt)


@dataclass(frozen=True)
class Forwarded(Constraint):
    """``**kwargs`` passed on to ``to`` (a function with declared options): each must be one of its parameters
    (not one the forwarding function sets itself, ``taken``) and is checked by its constraint there."""

    to: Callable
    taken: tuple[str, ...] = ()

    def check(self, value, option, where):
        target = inspect.signature(self.to).parameters
        declared = declared_options(self.to)
        out = {}
        for name, given in value.items():
            if name not in target or name in self.taken:
                takes = ", ".join(n for n, p in target.items() if p.kind is p.KEYWORD_ONLY and n not in self.taken)
                raise InvalidOptionError(name, given, f"left out: it is no option of {self.to.__name__}, which "
                                         f"takes {takes}", where)
            out[name] = declared[name].check(given, name, where) if name in declared else given
        return out

    def invalid(self):
        declared = declared_options(self.to)
        name = next(n for n, c in declared.items() if n not in self.taken and not is_exempt(c))
        return {name: declared[name].invalid()}


def checks_options(**constraints: Constraint):
    """Declare the constraints of a public function's options and check them before its body runs.

    Parameters
    ----------
    **constraints : Constraint
        One per option name of the decorated function.

    Returns
    -------
    callable
        The decorator. The wrapped function checks each option the caller passed (defaults are not
        checked: they are valid by construction), replaces it by the checked value and calls the
        function; ``declared_options(fn)`` returns the constraints.

    Raises
    ------
    TypeError
        At decoration, a constraint for a name the function has no parameter of.
    InvalidOptionError
        At a call, the first option (in signature order) whose value its constraint refuses.
    """
    def decorate(fn):
        signature = inspect.signature(fn)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"{fn.__qualname__} has no parameter {sorted(unknown)}")
        order = [name for name in signature.parameters if name in constraints]
        where = f"{_public_module(fn)}.{fn.__name__}"

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            given = bound.arguments
            for name in order:
                if name in given:
                    given[name] = constraints[name].check(given[name], name, where)
            return fn(*bound.args, **bound.kwargs)

        setattr(checked, _ATTRIBUTE, MappingProxyType(dict(constraints)))
        return checked

    return decorate


def declared_options(fn) -> Mapping[str, Constraint]:
    """The constraints :func:`checks_options` declared on ``fn`` (empty if none)."""
    return getattr(fn, _ATTRIBUTE, MappingProxyType({}))


def _public_module(fn) -> str:
    """``toolkit`` for the top-level front doors, else the public subpackage (``toolkit.plot``)."""
    parts = fn.__module__.split(".")
    if len(parts) > 1 and parts[1] in ("plot", "widgets", "activations", "analysis", "lab", "finetune"):
        return "toolkit" if parts[1] == "activations" else f"toolkit.{parts[1]}"
    return "toolkit"
