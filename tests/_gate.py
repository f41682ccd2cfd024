"""A tensor read held until the test lets it go: a pass stopped, watched or waited on mid-tensor without a
sleep racing its thread."""

import threading

TIMEOUT = 120  # generous: a bound on a hang, never a measure of speed


class Gate:
    """Holds the read of the ``n``-th tensor (counting from 1) until :meth:`open`; says when it is held."""

    def __init__(self, monkeypatch, n: int):
        from toolkit.sources.base import TensorRecord

        self.entered, self.gate, self.count, original = threading.Event(), threading.Event(), 0, TensorRecord.read

        def held(record):
            self.count += 1
            if self.count == n:
                self.entered.set()
                assert self.gate.wait(TIMEOUT), "the test never opened the gate"
            return original(record)

        monkeypatch.setattr(TensorRecord, "read", held)

    def open(self):
        self.gate.set()
