"""Constraints on what a public function works on (its data, figures, definitions), beside the options'
constraints of :mod:`toolkit.constraints`; the one way to exempt a parameter, :class:`Exempt` (defined there), is
re-exported here.

Every parameter of a public function is declared by :func:`~toolkit.constraints.checks_options`: an option
by its constraint, the data by :class:`DataOf`, a matplotlib object by :class:`Instance`, a dict of keywords
by :class:`Keywords`; a parameter whose value is checked elsewhere by a typed error of its own (a checkpoint,
by :class:`~toolkit.sources.SourceRequest`) is declared :class:`Exempt` with that reason. The contract test
asserts that the declared names equal the signature's, as scikit-learn's ``test_public_functions.py`` does,
so a new parameter cannot slip past.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from toolkit.constraints import Constraint, Exempt, is_exempt
from toolkit.errors import InvalidOptionError

__all__ = ["SOURCE", "AnyOf", "DataOf", "Exempt", "Instance", "Keywords", "is_exempt"]  # Exempt: toolkit.constraints


#: the checkpoint a pass measures: refused by its own typed errors where it is opened
SOURCE = Exempt("the checkpoint (a path, hub id, URL or Source): SourceTypeError / SourceNotFoundError from "
                "toolkit.sources.SourceRequest when it is opened")


def _class(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class DataOf(Constraint):
    """An ``xarray.Dataset`` (``array``: or a ``DataArray``; ``many``: or a non-empty list of them)."""

    array: bool = False
    many: bool = False

    def _expected(self, value) -> str:
        kinds = "an xarray.Dataset" + (" or DataArray" if self.array else "") + (
            " or a non-empty list of them" if self.many else "")
        if self.array or type(value).__name__ != "DataArray":
            return kinds + f", not {type(value).__name__}"
        how = "da.to_dataset()" if value.name is not None else "da.to_dataset(name='my_metric')"
        return f"{kinds}, not a DataArray: pass a Dataset, e.g. {how}"

    def check(self, value, option, where):
        import xarray as xr

        kinds = (xr.Dataset, xr.DataArray) if self.array else xr.Dataset
        ok = isinstance(value, kinds) or (self.many and isinstance(value, (list, tuple)) and len(value) > 0
                                          and all(isinstance(d, kinds) for d in value))
        if not ok:
            raise InvalidOptionError(option, value, self._expected(value), where)
        return value

    def invalid(self):
        return 3


@dataclass(frozen=True)
class Instance(Constraint):
    """An instance of the class ``dotted`` (imported when a value is checked: ``"matplotlib.axes.Axes"``)."""

    dotted: str
    what: str

    def check(self, value, option, where):
        if not isinstance(value, _class(self.dotted)):
            raise InvalidOptionError(option, value, self.what, where)
        return value

    def invalid(self):
        return "not an object of that type"


@dataclass(frozen=True)
class Keywords(Constraint):
    """A dict of keywords with str keys, passed on to ``to`` (for the message)."""

    to: str

    def check(self, value, option, where):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise InvalidOptionError(option, value, f"a dict of keyword arguments for {self.to}", where)
        return value

    def invalid(self):
        return ["not", "a", "dict"]


@dataclass(frozen=True)
class AnyOf(Constraint):
    """What one of ``constraints`` takes (the first that takes it gives the value); ``what`` for the message."""

    constraints: tuple
    what: str

    def check(self, value, option, where):
        for constraint in self.constraints:
            try:
                return constraint.check(value, option, where)
            except InvalidOptionError:
                continue
        raise InvalidOptionError(option, value, self.what, where)

    def invalid(self):
        return object()
