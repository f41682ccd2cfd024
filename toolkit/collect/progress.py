"""Progress reporting over units of work: a tqdm bar, a user callback, or nothing.

One :class:`Progress` serves the weight loop (one unit per stored tensor) and
``activation_stats`` (one unit per layer pass of a batch). It may be created
before its total is known, so the bar is on screen while the checkpoint is
still being opened (:meth:`Progress.phase`), and its count only moves forward.
"""

from __future__ import annotations

from collections.abc import Callable


class Progress:
    """Report ``done`` out of ``total`` to a tqdm bar and/or a callback.

    Parameters
    ----------
    total : int or None
        Units of work; None until :meth:`set_total`.
    callback : callable, optional
        ``callback(done, total, name)`` after each unit, and only then (so
        ``done / total`` is always defined).
    bar : tqdm.tqdm, optional
        Advanced by the units done, its postfix naming the last unit.
    """

    def __init__(self, total: int | None = None, callback: Callable[[int, int, str], None] | None = None, bar=None):
        self.total = total
        self.done = 0
        self._callback = callback
        self._bar = bar

    def phase(self, what: str) -> None:
        """Show on the bar what is happening before any unit can be counted (opening the checkpoint)."""
        if self._bar is not None:
            self._bar.set_postfix_str(what)

    def set_total(self, total: int) -> None:
        """The number of units, once known."""
        self.total = int(total)
        if self._bar is not None:
            self._bar.set_postfix_str("", refresh=False)  # the phase is over
            self._bar.reset(total=self.total)

    def step(self, name: str = "") -> None:
        """One more unit done."""
        self(self.done + 1, name)

    def __call__(self, done: int, name: str = "") -> None:
        """``done`` units are done (counts never go back: a smaller ``done`` is ignored)."""
        if done <= self.done:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(name[-40:], refresh=False)
            self._bar.update(done - self.done)
        self.done = done
        if self._callback is not None:
            self._callback(done, self.total or 0, name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def make_progress(progress, *, total: int | None, desc: str, unit: str = "tensor") -> Progress:
    """``progress`` is True (a ``tqdm.auto`` bar), False/None (silent), or a
    callable ``progress(done, total, name)`` called after each unit of work.

    ``total`` may be None (set it with :meth:`Progress.set_total`)."""
    if callable(progress):
        return Progress(total, callback=progress)
    if progress:
        from tqdm.auto import tqdm

        return Progress(total, bar=tqdm(total=total, desc=desc, unit=unit))
    return Progress(total)
