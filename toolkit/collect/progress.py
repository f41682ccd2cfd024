"""Progress reporting over units of work: a tqdm bar, a user callback, or nothing.

One :class:`Progress` serves the weight loop (one unit per stored tensor) and
``activation_stats`` (one unit per layer pass of a batch); its count only
moves forward, and a jump moves the bar by the units it covers.
"""

from __future__ import annotations

from collections.abc import Callable


class Progress:
    """Report ``done`` out of ``total`` to a tqdm bar and/or a callback.

    Parameters
    ----------
    total : int
        Units of work.
    callback : callable, optional
        ``callback(done, total, name)`` after each unit, and only then (so
        ``done / total`` is always defined).
    bar : tqdm.tqdm, optional
        Advanced by the units done, its postfix naming the last unit.
    """

    def __init__(self, total: int, callback: Callable[[int, int, str], None] | None = None, bar=None):
        self.total = total
        self.done = 0
        self._callback = callback
        self._bar = bar

    def step(self, name: str = "") -> None:
        """One more unit done."""
        self(self.done + 1, name)

    def __call__(self, done: int, name: str = "") -> None:
        """``done`` units are done (counts never go back: a smaller ``done`` is ignored)."""
        if done <= self.done:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(name[-50:], refresh=False)
            self._bar.update(done - self.done)
        self.done = done
        if self._callback is not None:
            self._callback(done, self.total, name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def make_progress(progress, *, total: int, desc: str, unit: str = "tensor") -> Progress:
    """``progress`` is True (a ``tqdm.auto`` bar counting ``unit``), False/None (silent), or a
    callable ``progress(done, total, name)`` called after each unit of work."""
    if callable(progress):
        return Progress(total, callback=progress)
    if progress:
        from tqdm.auto import tqdm

        return Progress(total, bar=tqdm(total=total, desc=desc, unit=unit))
    return Progress(total)
