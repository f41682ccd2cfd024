"""Progress reporting over units of work: a tqdm bar, a user callback, or nothing."""

from __future__ import annotations


class Progress:
    """Report ``done`` out of ``total`` to a tqdm bar and/or a callback."""

    def __init__(self, total: int, callback=None, bar=None):
        self.total = total
        self.done = 0
        self._callback = callback
        self._bar = bar

    def step(self, name: str = "") -> None:
        """One more unit done."""
        self(self.done + 1, name)

    def __call__(self, done: int, name: str = "") -> None:
        self.done = done
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix_str(name[-40:], refresh=False)
        if self._callback is not None:
            self._callback(done, self.total, name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def make_progress(progress, *, total: int, desc: str) -> Progress:
    """``progress`` is True (a ``tqdm.auto`` bar), False/None (silent), or a
    callable ``progress(done, total, name)`` called after each unit of work."""
    if callable(progress):
        return Progress(total, callback=progress)
    if progress:
        from tqdm.auto import tqdm

        return Progress(total, bar=tqdm(total=total, desc=desc, unit="tensor"))
    return Progress(total)
