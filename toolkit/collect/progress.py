"""Progress reporting over units of work: a tqdm bar, a user callback, or nothing.

One :class:`Progress` serves the weight loop (one unit per stored tensor) and
``activation_stats`` (one unit per layer pass of a batch); its count only
moves forward, and a jump moves the bar by the units it covers.

A bar can be on screen before its units are known: ``weight_stats`` and
``compare`` make it before the plan (opening a GGUF file takes seconds), so
it says what is being done (:meth:`Progress.status`, ``"opening the
checkpoint"``) until :meth:`Progress.begin` gives the count of units.
"""

from __future__ import annotations

from collections.abc import Callable

from toolkit.redaction import redact_text


class Progress:
    """Report ``done`` out of ``total`` to a tqdm bar and/or a callback.

    Parameters
    ----------
    total : int or None
        Units of work; None until :meth:`begin` says.
    callback : callable, optional
        ``callback(done, total, name)`` after each unit, and only then (so
        ``done / total`` is always defined).
    bar : tqdm.tqdm, optional
        Advanced by the units done, its postfix naming the last unit.

    Used as a context manager, it closes the bar on the way out (an error included).
    """

    def __init__(self, total: int | None, callback: Callable[[int, int, str], None] | None = None, bar=None):
        self.total = total
        self.done = 0
        self._callback = callback
        self._bar = bar

    def status(self, text: str) -> None:
        """Show ``text`` in place of the count until :meth:`begin` (``"opening the checkpoint"``);
        the callback hears nothing (no unit is done)."""
        if self._bar is not None:
            self._bar.bar_format = _status_format(text)
            self._bar.refresh()

    def begin(self, total: int) -> None:
        """The work is known: ``total`` units, none done; the bar turns into a count from 0."""
        self.total, self.done = total, 0
        if self._bar is not None:
            self._bar.bar_format = None
            self._bar.reset(total=total)

    def step(self, name: str = "") -> None:
        """One more unit done."""
        self(self.done + 1, name)

    def __call__(self, done: int, name: str = "") -> None:
        """``done`` units are done (counts never go back: a smaller ``done`` is ignored)."""
        if done <= self.done:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(redact_text(name)[-50:], refresh=False)
            self._bar.update(done - self.done)
        self.done = done
        if self._callback is not None:
            self._callback(done, self.total, name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def make_progress(progress, *, total: int | None, desc: str, unit: str = "tensor", status: str = "") -> Progress:
    """``progress`` is True (a ``tqdm.auto`` bar counting ``unit``), False/None (silent), or a
    callable ``progress(done, total, name)`` called after each unit of work.

    With ``total=None`` (the work not known yet) the bar shows ``status``
    (:meth:`Progress.status`) until :meth:`Progress.begin`.
    """
    if callable(progress):
        return Progress(total, callback=progress)
    if progress:
        from tqdm.auto import tqdm

        return Progress(total, bar=tqdm(total=total, desc=redact_text(desc), unit=unit,
                                        bar_format=_status_format(status) if status else None))
    return Progress(total)


def _status_format(text: str) -> str:
    """A tqdm ``bar_format`` showing ``text`` (its URLs' secrets masked) after the description (braces kept
    literal)."""
    return "{desc}: " + redact_text(text).replace("{", "{{").replace("}", "}}")


def opening_progress(progress, desc: str, what: str = "the checkpoint") -> Progress:
    """A :func:`make_progress` made before the plan: the bar says ``opening <what> …`` until
    :meth:`Progress.begin` gives the number of tensors."""
    return make_progress(progress, total=None, desc=desc, status=f"opening {what} \u2026")
