"""``cached_property`` without a lock shared by every instance.

Python 3.11's :class:`functools.cached_property` computes under one ``RLock``
per *class attribute*, shared by all instances (removed in Python 3.12,
CPython issue gh-87634): two threads reading the property of two different
objects run one after the other. A pass measures on two pipeline threads,
each with its own :class:`~toolkit.metrics.diff.DiffContext`, and the Gram
matrix and ``eigvalsh`` of each pair's difference were computed under that
lock: on a Qwen2.5-7B-shaped layer ``compare(..., metrics=["delta_stable_rank"])``
took 37 s where the same work on the two pipelines takes about 20 s, every
matrix measured after the other pipeline's had finished.

:class:`cached_property` here is the 3.12 semantics: the first read computes
the value and stores it in the instance's ``__dict__`` (a non-data
descriptor, so later reads never reach it). Two threads reading the same
instance's property at once would both compute it (the last one stored wins);
the toolkit reads one object's properties from one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class cached_property(Generic[T]):  # noqa: N801 - the name of the functools descriptor it stands in for
    """Like :class:`functools.cached_property` (Python 3.12 and later): computed once per instance, no lock.

    Examples
    --------
    >>> class Pair:
    ...     calls = 0
    ...     @cached_property
    ...     def total(self):
    ...         Pair.calls += 1
    ...         return 3
    >>> p = Pair()
    >>> p.total, p.total, Pair.calls
    (3, 3, 1)
    """

    def __init__(self, func: Callable[[Any], T]):
        self.func = func
        self.attrname: str | None = None
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    def __set_name__(self, owner: type, name: str) -> None:
        if self.attrname is not None and name != self.attrname:
            raise TypeError(f"one cached_property cannot be both {self.attrname!r} and {name!r}")
        self.attrname = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]
        if self.attrname is None:
            raise TypeError("cached_property used without __set_name__ (assigned outside a class body)")
        value = self.func(instance)
        instance.__dict__[self.attrname] = value
        return value
