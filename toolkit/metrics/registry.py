"""The metric registry: one frozen record per statistic, with its metadata.

A weight metric is a pure function ``func(w, s) -> float`` of a matrix
``w`` (torch tensor, shape (out_features, in_features), float32 or float64)
and its singular values ``s`` (1-D float64 tensor, descending; ``None`` when
the metric does not declare ``needs_singular_values``). Singular values are
computed once per matrix by the caller and shared by every spectral metric.

A diff metric (``kind="diff"``) is ``func(base, target, ctx) -> float``; see
:mod:`toolkit.metrics.diff`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from toolkit.errors import ToolkitError, UnknownMetricError

KINDS = ("weight", "diff")


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
    options : dict
        Default keyword options passed to ``func`` (part of the cache key).
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

    def attrs(self) -> dict[str, str]:
        """NetCDF-safe attrs for the Dataset variable holding this metric."""
        return {
            "long_name": self.long_name,
            "units": self.units,
            "description": self.description,
            "reference": self.reference,
        }


_REGISTRY: dict[str, Metric] = {}


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
    overwrite: bool = False,
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
        ``func(base, target, ctx) -> float`` for diff metrics.
    long_name, units, description, reference : str
        Metadata stored as the variable's attrs.
    kind : {"weight", "diff"}
    needs_singular_values : bool
        Ask the caller to pass the shared singular values.
    overwrite : bool
        Replace an existing metric of that name (otherwise a duplicate name
        raises ``ToolkitError``).

    Returns
    -------
    Metric, or a decorator returning ``func`` unchanged.

    Raises
    ------
    ToolkitError
        Duplicate name without ``overwrite=True``, or an unknown ``kind``.
    """
    if kind not in KINDS:
        raise ToolkitError(f"metric kind must be one of {KINDS}, got {kind!r}")
    if not name.isidentifier():
        raise ToolkitError(f"metric name must be a snake_case identifier, got {name!r}")

    def _add(f: Callable):
        if name in _REGISTRY and not overwrite:
            raise ToolkitError(
                f"a metric named {name!r} is already registered; pass overwrite=True to replace it"
            )
        m = Metric(
            name=name,
            func=f,
            long_name=long_name,
            units=units,
            description=description,
            reference=reference,
            kind=kind,
            needs_singular_values=needs_singular_values,
        )
        _REGISTRY[name] = m
        return m

    if func is None:

        def deco(f: Callable) -> Callable:
            _add(f)
            return f

        return deco
    return _add(func)


def unregister_metric(name: str) -> None:
    """Remove a metric (mainly for tests and notebooks that re-register)."""
    _REGISTRY.pop(name, None)


def get_metric(name: str) -> Metric:
    """Return the registered metric ``name``.

    Raises
    ------
    UnknownMetricError
        Names the unknown metric and lists the known ones.
    """
    _ensure_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMetricError(name, _REGISTRY) from None


def list_metrics(kind: str = "weight") -> list[str]:
    """Names of the registered metrics of ``kind``, in registration order."""
    _ensure_builtins()
    return [n for n, m in _REGISTRY.items() if m.kind == kind]


def resolve_metrics(names, kind: str = "weight") -> list[Metric]:
    """Metric records for ``names`` (None: every metric of ``kind``).

    Raises
    ------
    UnknownMetricError
        For the first unknown name; also when a name is of another kind.
    """
    _ensure_builtins()
    if names is None:
        return [m for m in _REGISTRY.values() if m.kind == kind]
    if isinstance(names, str):
        names = [names]
    out = []
    for n in names:
        m = get_metric(n)
        if m.kind != kind:
            raise UnknownMetricError(n, list_metrics(kind))
        out.append(m)
    return out


def _ensure_builtins() -> None:
    # Built-in metric modules register themselves on import.
    from toolkit.metrics import builtin  # noqa: F401
