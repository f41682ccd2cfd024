"""A pass held at a point of the test's choosing until the test lets it go: a pass stopped, watched or
waited on mid-way without a sleep racing its thread."""

import threading

TIMEOUT = 120  # generous: a bound on a hang, never a measure of speed


class Gate:
    """Holds the ``n``-th call (counting from 1) of what it wraps until :meth:`open`; says when it holds it.

    :meth:`on_read` holds a tensor read (the pass cannot end: it needs that tensor; a reader ahead of the
    pass may hold it in another thread). :meth:`on_progress` holds the pass's own thread after its ``n``-th
    stored tensor, as a large tensor being measured does: nothing of the pass moves until :meth:`open`.
    """

    def __init__(self, n: int):
        self.n, self.count = n, 0
        self.entered, self.gate = threading.Event(), threading.Event()

    def _pass(self) -> None:
        self.count += 1
        if self.count == self.n:
            self.entered.set()
            assert self.gate.wait(TIMEOUT), "the test never opened the gate"

    @classmethod
    def on_read(cls, monkeypatch, n: int) -> "Gate":
        from toolkit.sources.base import TensorRecord

        gate, original = cls(n), TensorRecord.read

        def held(record):
            gate._pass()
            return original(record)

        monkeypatch.setattr(TensorRecord, "read", held)
        return gate

    @classmethod
    def on_progress(cls, live, n: int) -> "Gate":
        """``live``: a :class:`~toolkit.widgets.live_pass.LivePass` not started yet."""
        gate, original = cls(n), live._progress

        def held(done, total, name=""):
            original(done, total, name)
            gate._pass()

        live._progress = held
        return gate

    def open(self) -> None:
        self.gate.set()
