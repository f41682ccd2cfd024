"""The metric registry: one frozen record per statistic, with its metadata.

A weight metric is a pure function ``func(w, s, **options) -> float`` of a
matrix ``w`` (torch tensor, shape (out_features, in_features), float32 or
float64) and its singular values ``s`` (1-D float64 CPU tensor, descending,
length ``min(out, in)``; ``None`` when the metric does not declare
``needs_singular_values``). Singular values are computed once per matrix by
the caller (:func:`toolkit.metrics.singular_values`) and shared by every
spectral metric.

A diff metric (``kind="diff"``) is ``func(base, target, ctx) -> float``; see
:mod:`toolkit.metrics.diff`. One registered with ``needs_matrices=False``
reads only the shared context (its entry-wise sums) and is called with
``base = target = None``, so the caller never converts the matrices.

The registry is a leaf: it imports no other metric module. Importing
:mod:`toolkit.metrics` registers every built-in metric
(:mod:`toolkit.metrics.builtin`) and tells the registry how to compute
singular values (:func:`use_singular_values`, called by
:mod:`toolkit.metrics.spectral`); the one-matrix front door
:func:`~toolkit.metrics.compute_weight_metrics` lives beside the evaluator
(:mod:`toolkit.metrics.compute`).

Undefined values
----------------
Where a statistic is undefined for a matrix (all zeros, NaN/Inf entries, a
spectrum too short for a power-law fit, ...) the function raises
:class:`DegenerateMatrix` with a ``reason``. It never returns a silent NaN.
The caller turns it into NaN and records the reason:
:meth:`Metric.evaluate` and :func:`~toolkit.metrics.compute_weight_metrics` do exactly that
and return a :class:`MetricValue` ``(value, reason)``; ``reason`` is ``""``
for a defined value. Any other exception is a bug and propagates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from toolkit.constraint_types import Exempt, Keywords
from toolkit.constraints import Flag, Function, OneOf, Optional, Text, checks_options
from toolkit.domains import UNBOUNDED, natural_domain
from toolkit.errors import (
    DegenerateMatrix,
    DuplicateMetricError,  # noqa: F401  (re-exported: the former name of DuplicateRegistrationError)
    DuplicateRegistrationError,
    ToolkitError,
    UnknownMetricError,
)

KINDS = ("weight", "diff")


class MetricValue(NamedTuple):
    """A metric's value and, when undefined (``value`` NaN), the reason."""

    value: float
    reason: str = ""


@dataclass(frozen=True)
class Metric:
    """One registered statistic.

    Attributes
    ----------
    name : str
        snake_case variable name in Datasets (``stable_rank``).
    func : callable
        The function (see module docstring for its signature per kind).
    long_name : str
        Human label (colorbar, dropdown).
    units : str
        UDUNITS-style units; ``"1"`` for dimensionless.
    description : str
        The formula, in words and symbols.
    reference : str
        Paper or convention the formula comes from.
    kind : str
        ``"weight"`` or ``"diff"``.
    needs_singular_values : bool
        Whether ``func`` reads the shared singular values.
    needs_matrices : bool
        Diff metrics: whether ``func`` reads the float32 matrices (else it is
        called with ``None`` for both and reads only ``ctx``).
    any_dtype : bool
        Weight metrics: ``func`` accepts ``w`` in any float dtype as stored
        (bf16, fp16); when every requested metric does, no float32 copy is made.
    options : tuple of (str, value) pairs
        Default keyword options passed to ``func`` (part of the cache key).
    opt_in : bool
        Computed only when asked for by name (it costs more than the others):
        ``metrics=None`` leaves it out; :func:`list_metrics` lists it.
    domain : (float, float)
        The values the metric can take (``(0.0, 1.0)`` for a fraction, ``(1.0, inf)``
        for a condition number; :mod:`toolkit.domains`), written to the variable's
        attrs as CF ``valid_min`` / ``valid_max``; every colour scale drawn for it
        stays inside (:func:`toolkit.plot.scale_rules.domain`).
    """

    name: str
    func: Callable = field(compare=False)
    long_name: str
    units: str = "1"
    description: str = ""
    reference: str = ""
    kind: str = "weight"
    needs_singular_values: bool = False
    options: tuple = ()
    needs_matrices: bool = True
    any_dtype: bool = False
    opt_in: bool = False
    domain: tuple = UNBOUNDED

    def attrs(self) -> dict:
        """NetCDF-safe attrs for the Dataset variable holding this metric (``valid_min`` / ``valid_max``: the
        finite ends of its ``domain``)."""
        ends = {k: float(v) for k, v in zip(("valid_min", "valid_max"), self.domain, strict=True) if math.isfinite(v)}
        return {
            "long_name": self.long_name,
            "units": self.units,
            "description": self.description,
            "reference": self.reference,
            **ends,
        }

    def evaluate(self, w, s=None, **options) -> MetricValue:
        """Call a weight metric, turning :class:`DegenerateMatrix` into NaN.

        Parameters
        ----------
        w : torch.Tensor, shape (out, in)
        s : torch.Tensor or None
            Shared singular values (descending, float64); computed here when
            the metric needs them and none are given.
        **options
            Override the registered default options.

        Returns
        -------
        MetricValue
            ``(value, "")`` or ``(nan, reason)``.
        """
        try:
            if self.needs_singular_values and s is None:
                s = _singular_values(w)
            value = self.func(w, s if self.needs_singular_values else None, **{**dict(self.options), **options})
        except DegenerateMatrix as e:
            return MetricValue(math.nan, e.reason)
        return MetricValue(float(value), "")


_REGISTRY: dict[str, Metric] = {}
#: ``func(w) -> s``: how :meth:`Metric.evaluate` computes the singular values it is not given
#: (set by :mod:`toolkit.metrics.spectral` through :func:`use_singular_values`).
_SINGULAR_VALUES: list[Callable] = []


def use_singular_values(func: Callable) -> None:
    """Set how :meth:`Metric.evaluate` computes the singular values of a matrix when none are given.

    Called once by :mod:`toolkit.metrics.spectral` with
    :func:`~toolkit.metrics.singular_values`, so that the registry imports no
    metric module.

    Parameters
    ----------
    func : callable
        ``func(w) -> s``: ``w`` a tensor (out, in), ``s`` its singular values
        (1-D float64 CPU tensor, descending); raises :class:`DegenerateMatrix`
        where they are undefined.
    """
    _SINGULAR_VALUES[:] = [func]


def _singular_values(w):
    if not _SINGULAR_VALUES:  # only when toolkit.metrics.spectral was never imported, which importing any
        raise ToolkitError(  # module of toolkit.metrics does
            "no singular-value function is set for Metric.evaluate; import toolkit.metrics"
        )
    return _SINGULAR_VALUES[0](w)


@checks_options(name=Text("a metric name, e.g. 'my_norm'"), func=Optional(Function(signature="func(w, s) -> float")),
                long_name=Text("the figure label"), units=Text("'1' when dimensionless"),
                description=Text(empty=True), reference=Text(empty=True),
                options=Optional(Keywords("the metric's function")), kind=OneOf(KINDS), needs_singular_values=Flag(),
                overwrite=Flag(), needs_matrices=Flag(), any_dtype=Flag(), opt_in=Flag(),
                domain=Exempt("(low, high), the values the metric can take: a ToolkitError naming the metric "
                              "refuses anything else"))
def register_metric(
    name: str,
    func: Callable | None = None,
    *,
    long_name: str,
    units: str = "1",
    description: str = "",
    reference: str = "",
    kind: str = "weight",
    needs_singular_values: bool = False,
    options: dict | None = None,
    overwrite: bool = False,
    needs_matrices: bool = True,
    any_dtype: bool = False,
    opt_in: bool = False,
    domain: tuple | None = None,
):
    """Register a statistic so ``weight_stats`` (or ``compare``) computes it.

    Use as a call, ``register_metric("my_norm", fn, long_name=...)``, or as a
    decorator, ``@register_metric("my_norm", long_name=...)``.

    Parameters
    ----------
    name : str
        snake_case name; becomes the Dataset variable.
    func : callable, optional
        ``func(w, s) -> float`` for weight metrics (``w``: tensor (out, in);
        ``s``: descending singular values, float64, or None),
        ``func(base, target, ctx) -> float`` for diff metrics. Raise
        :class:`DegenerateMatrix` where the value is undefined.
    long_name, units, description, reference : str
        Metadata stored as the variable's attrs.
    kind : {"weight", "diff"}
    needs_singular_values : bool
        Ask the caller to pass the shared singular values.
    needs_matrices : bool, default True
        Diff metrics only: False declares that ``func`` reads nothing but
        ``ctx`` (e.g. ``ctx.sums``); it is then called with
        ``base = target = None`` and the matrices are not converted for it.
    any_dtype : bool, default False
        Weight metrics only: True declares that ``func`` accepts ``w`` in its
        storage dtype (bfloat16, float16) as well as float32; when every
        requested metric does, ``weight_stats`` skips the float32 conversion.
    options : dict, optional
        Default keyword options passed to ``func``.
    opt_in : bool, default False
        Compute it only when asked for by name (``metrics=None`` leaves it
        out): for costly metrics such as a Marchenko-Pastur fit.
    domain : (float, float), optional
        The values the metric can take (``(0.0, 1.0)`` for a fraction; ``-inf`` / ``inf``
        for an open end); colour scales drawn for it stay inside. Default: the built-in
        table :data:`toolkit.domains.NATURAL_DOMAINS`, else unbounded.
    overwrite : bool
        Replace an existing metric of that name. Re-registering the same
        module-level function (same module and qualified name, e.g. after
        ``importlib.reload``) is always allowed.

    Returns
    -------
    Metric, or a decorator returning ``func`` unchanged.

    Raises
    ------
    DuplicateRegistrationError
        Duplicate name without ``overwrite=True`` (``kind="metric"``; also
        importable under its former name ``DuplicateMetricError``).
    ToolkitError
        An unknown ``kind`` or a name that is not an identifier.
    """
    if kind not in KINDS:
        raise ToolkitError(f"metric kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ToolkitError(f"metric name must be a snake_case identifier, got {name!r}")
    bounds = natural_domain(name) if domain is None else _checked_domain(name, domain)

    def _add(f: Callable):
        old = _REGISTRY.get(name)
        if old is not None and not overwrite and _qualname(old.func) != _qualname(f):
            where = f"{getattr(old.func, '__module__', '?')}.{getattr(old.func, '__qualname__', '?')}"
            raise DuplicateRegistrationError("metric", name, old, f"{old.long_name!r}, from {where}")
        m = Metric(
            name=name,
            func=f,
            long_name=long_name,
            units=units,
            description=description,
            reference=reference,
            kind=kind,
            needs_singular_values=needs_singular_values,
            options=tuple(sorted((options or {}).items())),
            needs_matrices=bool(needs_matrices),
            any_dtype=bool(any_dtype),
            opt_in=bool(opt_in),
            domain=bounds,
        )
        _REGISTRY[name] = m
        return m

    if func is None:

        def deco(f: Callable) -> Callable:
            _add(f)
            return f

        return deco
    return _add(func)


def _checked_domain(name: str, domain) -> tuple[float, float]:
    """``domain`` as ``(low, high)`` floats, or a ToolkitError saying what a domain is."""
    try:
        lo, hi = (float(x) for x in domain)
    except (TypeError, ValueError):
        lo = hi = math.nan
    if not lo < hi:
        raise ToolkitError(f"the domain of metric {name!r} must be (low, high) with low < high, e.g. (0.0, 1.0) "
                           f"or (0.0, math.inf); got {domain!r}")
    return lo, hi


def _qualname(f) -> tuple:
    # Module-level functions keep their identity across a reload; lambdas and
    # nested functions are always distinct.
    q = getattr(f, "__qualname__", "")
    if not q or "<" in q:
        return (id(f),)
    return (getattr(f, "__module__", None), q)


def unregister_metric(name: str) -> None:
    """Remove a metric (mainly for tests and notebooks that re-register)."""
    _REGISTRY.pop(name, None)


@checks_options(name=Text("a registered metric's name, e.g. 'stable_rank'"))
def get_metric(name: str) -> Metric:
    """Return the registered metric ``name``.

    Raises
    ------
    UnknownMetricError
        Names the unknown metric and lists the known ones.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        raise UnknownMetricError(name, _REGISTRY) from None


@checks_options(kind=OneOf(KINDS), opt_in=Flag())
def list_metrics(kind: str = "weight", *, opt_in: bool = False) -> list[str]:
    """Names of the registered metrics of ``kind``, in registration order.

    Parameters
    ----------
    kind : {"weight", "diff"}
    opt_in : bool, default False
        Also list the opt-in metrics (computed only when asked for by name);
        without it the list is what ``metrics=None`` computes.
    """
    return [n for n, m in _REGISTRY.items() if m.kind == kind and (opt_in or not m.opt_in)]


def resolve_metrics(names, kind: str = "weight") -> list[Metric]:
    """Metric records for ``names`` (None: every metric of ``kind`` but the ``opt_in`` ones).

    Raises
    ------
    UnknownMetricError
        For the first unknown name: the message lists the metrics of ``kind``
        and the close matches; for a name of another kind it says which kind
        and which function computes it.
    """
    if names is None:
        return [m for m in _REGISTRY.values() if m.kind == kind and not m.opt_in]
    if isinstance(names, str):
        names = [names]
    out = []
    for n in names:
        m = _REGISTRY.get(n) if isinstance(n, str) else None
        if m is None or m.kind != kind:
            others = {name: o.kind for name, o in _REGISTRY.items() if o.kind != kind}
            raise UnknownMetricError(n, list_metrics(kind, opt_in=True), kind=kind, others=others)
        out.append(m)
    return out
