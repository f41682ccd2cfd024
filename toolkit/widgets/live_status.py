"""The state of a live pass as one locked status object (huggingface_hub's ``_upload_large_folder.py``, smaller).

The pass's thread writes (:meth:`LiveStatus.update`, :meth:`LiveStatus.report`) and the view reads a frozen
:class:`StatusSnapshot` (:meth:`LiveStatus.snapshot`), taken under the same lock: the state, the tensor just
stored, the count and the time left always belong together, where the view read the pass's attributes one by
one while its thread changed them. The states are a :class:`PassState` enum whose values are the old strings.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from toolkit.widgets.live_clock import PassStatus, seconds_left
from toolkit.widgets.live_pace import Pace

__all__ = ["LiveStatus", "PassState", "StatusSnapshot"]


class PassState(StrEnum):
    """Where a live pass is; each value equals the string the pass used before (``PassState.DONE == "done"``)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        """A segment ran and ended (done, stopped or failed): nothing is left to wait for."""
        return self in (PassState.DONE, PassState.STOPPED, PassState.FAILED)


@dataclass(frozen=True)
class StatusSnapshot:
    """What the view reads of a live pass, all of it taken at one moment.

    Attributes
    ----------
    state : PassState
    stopping : bool
        Stop was asked and the tensor being measured is not finished yet.
    error : Exception or None
    look : tuple of str or None
        The components of the first look, while it runs.
    name : str
        The last tensor stored.
    first_cells_s : float or None
        Seconds from the segment's start to its first cells offered.
    done, total, from_cache : int
        Tensors stored in this run, in the run, and of those stored the ones found in the cache.
    elapsed : float
        Seconds measured over every segment, the running one included.
    clock : PassStatus
        What the clock reads (:func:`toolkit.widgets.live_clock.seconds_left`).
    seconds_left : float or None
        The clock's reading: None when nothing runs, nothing is left or nothing was computed yet.
    """

    state: PassState
    stopping: bool
    error: BaseException | None
    look: tuple | None
    name: str
    first_cells_s: float | None
    done: int
    total: int
    from_cache: int
    elapsed: float
    clock: PassStatus
    seconds_left: float | None


#: The fields :meth:`LiveStatus.update` sets.
FIELDS = ("state", "stopping", "error", "look", "name", "first_cells_s")


class LiveStatus:
    """One live pass's status behind one lock: written by the pass's thread, read as a :class:`StatusSnapshot`.

    Parameters
    ----------
    pace : Pace, optional
        The run's count and clock (replaced with :meth:`use` when a new run starts).

    Examples
    --------
    >>> status = LiveStatus()
    >>> status.update(state="running")
    >>> status.snapshot().state is PassState.RUNNING
    True
    """

    def __init__(self, pace: Pace | None = None):
        self._lock = threading.Lock()
        self._pace = pace if pace is not None else Pace()
        self._state, self._stopping, self._error, self._look = PassState.IDLE, False, None, None
        self._name, self._first_cells_s = "", None

    @property
    def pace(self) -> Pace:
        return self._pace

    def use(self, pace: Pace) -> None:
        """A new run's :class:`Pace`."""
        with self._lock:
            self._pace = pace

    def update(self, **changes) -> None:
        """Set some of :data:`FIELDS` at once (``state`` as a :class:`PassState` or its value).

        Raises
        ------
        TypeError
            A field that is not one of :data:`FIELDS`.
        ValueError
            A state that is no :class:`PassState`.
        """
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise TypeError(f"LiveStatus.update: no field {sorted(unknown)}; the fields are {list(FIELDS)}")
        if "state" in changes:
            changes["state"] = PassState(changes["state"])
        if "look" in changes and changes["look"] is not None:
            changes["look"] = tuple(changes["look"])
        with self._lock:
            for key, value in changes.items():
                setattr(self, f"_{key}", value)

    def report(self, done: int, total: int, name: str = "") -> None:
        """A tensor stored: the count (:meth:`Pace.report`) and its name, together."""
        with self._lock:
            self._pace.report(done, total, name)
            self._name = name

    def read(self, key: str):
        """One field of :data:`FIELDS`, read under the lock."""
        with self._lock:
            return getattr(self, f"_{key}")

    def snapshot(self) -> StatusSnapshot:
        """Everything the view shows, taken at one moment."""
        with self._lock:
            pace = self._pace
            clock = pace.status()
            return StatusSnapshot(state=self._state, stopping=self._state is PassState.RUNNING and self._stopping,
                                  error=self._error, look=self._look, name=self._name,
                                  first_cells_s=self._first_cells_s, done=pace.done, total=pace.total,
                                  from_cache=pace.from_cache, elapsed=pace.elapsed(), clock=clock,
                                  seconds_left=seconds_left(clock))
