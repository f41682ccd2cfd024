"""``toolkit.cached.cached_property``: once per instance, and two instances computed at the same time.

Python 3.11's ``functools.cached_property`` computes under one lock per class attribute, shared by every
instance: the two pipelines of a pass measured their pairs' ΔW spectra one after the other (issue 42). A
barrier that both getters must reach proves the two computations overlap (with the shared lock the second
getter never starts while the first waits, and the barrier breaks).
"""

from __future__ import annotations

import threading

import pytest
import torch

from toolkit.cached import cached_property
from toolkit.metrics import diff as diff_module
from toolkit.metrics import spectral


def _both_at_once(read):
    """Call ``read(0)`` and ``read(1)`` on two threads; return their results and errors."""
    results, errors = [None, None], []

    def run(i):
        try:
            results[i] = read(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors


def test_computed_once_per_instance_and_stored():
    class Pair:
        calls = 0

        @cached_property
        def total(self):
            """The total."""
            Pair.calls += 1
            return [Pair.calls]

    a, b = Pair(), Pair()
    assert a.total is a.total and a.total == [1] and b.total == [2] and Pair.calls == 2
    assert a.__dict__["total"] == [1] and Pair.total.__doc__ == "The total."
    del a.total  # invalidated as functools' is: recomputed
    assert a.total == [3]


def test_two_instances_compute_side_by_side():
    barrier = threading.Barrier(2, timeout=10)

    class Slow:
        @cached_property
        def value(self):
            barrier.wait()  # both getters inside at once, or BrokenBarrierError
            return id(self)

    objs = [Slow(), Slow()]
    results, errors = _both_at_once(lambda i: objs[i].value)
    assert not errors and results == [id(o) for o in objs]


def test_two_pairs_delta_spectra_side_by_side(monkeypatch):
    """Two DiffContexts (a pass's two pipelines) compute their ΔW spectra at the same time."""
    barrier = threading.Barrier(2, timeout=10)
    real = spectral.difference_singular_values

    def waiting(base, target):
        barrier.wait()
        return real(base, target)

    monkeypatch.setattr(spectral, "difference_singular_values", waiting)
    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(20, 30, generator=g), torch.randn(20, 30, generator=g)) for _ in range(2)]
    ctxs = [diff_module.DiffContext(b, t) for b, t in pairs]
    results, errors = _both_at_once(lambda i: ctxs[i].delta_singular_values)
    assert not errors
    for (b, t), s in zip(pairs, results, strict=True):
        want = torch.linalg.svdvals(t.double() - b.double())
        assert torch.allclose(s, want, rtol=1e-9, atol=1e-9 * float(want[0])), (s - want).abs().max()


def test_assigned_outside_a_class_body_is_a_type_error():
    prop = cached_property(lambda self: 1)

    class Late:
        pass

    Late.x = prop  # no __set_name__
    with pytest.raises(TypeError, match="__set_name__"):
        getattr(Late(), "x")  # noqa: B009 - the read is the test
