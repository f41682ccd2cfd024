"""The read-ahead's memory budget (issue 38): an item is read while the previous one is in use only when the
two fit in ``READ_AHEAD_BYTES`` together; otherwise it is read after the previous one has been released, so
``compare`` never holds two 7B-shaped mlp pairs at once."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch

import toolkit
from toolkit.collect.cache import open_cache
from toolkit.collect.execute.stream import READ_AHEAD_BYTES, map_tensors, read_ahead
from toolkit.collect.measure.pairs import PairMeasurement
from toolkit.collect.plan import plan_pieces
from toolkit.collect.plan.pairs import pair_tensors
from toolkit.sources import SourceRequest
from toolkit.testing import write_tiny_checkpoint


class Item:
    """A stand-in for a read tensor pair, whose release the test can see."""

    def __init__(self, i: int):
        self.i = i


class Log:
    """Readers that record, when each is called, which earlier items are still alive."""

    def __init__(self, n: int):
        self.alive: dict[int, weakref.ref] = {}
        self.seen: dict[int, list[int]] = {}
        self.lock = threading.Lock()
        self.readers = [self.reader(i) for i in range(n)]

    def reader(self, i: int):
        def read():
            gc.collect()
            with self.lock:
                self.seen[i] = sorted(j for j, ref in self.alive.items() if ref() is not None)
                item = Item(i)
                self.alive[i] = weakref.ref(item)
            return item
        return read


def consume(items) -> list[int]:
    out = []
    for item in items:
        out.append(item.i)
        del item
    return out


def test_items_over_the_budget_are_read_after_the_previous_one_is_released():
    log = Log(4)
    big = READ_AHEAD_BYTES // 2 + 1  # two of them do not fit
    assert consume(read_ahead(log.readers, sizes=[big] * 4)) == [0, 1, 2, 3]
    assert log.seen == {0: [], 1: [], 2: [], 3: []}


def test_items_within_the_budget_are_read_ahead():
    log = Log(4)
    items = read_ahead(log.readers, sizes=[READ_AHEAD_BYTES // 2] * 4)
    first = next(items)
    assert first.i == 0
    for _ in range(100):  # the reader thread loads item 1 while item 0 is held here
        if 1 in log.seen:
            break
        threading.Event().wait(0.01)
    assert log.seen[1] == [0]
    del first
    assert consume(items) == [1, 2, 3]


def test_the_budget_counts_both_neighbours():
    log = Log(4)
    small, big = 1 << 20, READ_AHEAD_BYTES - (1 << 20)
    assert consume(read_ahead(log.readers, sizes=[big, big, small, small])) == [0, 1, 2, 3]
    assert log.seen[1] == []  # big + big: read after 0 was released
    assert log.seen[2] in ([], [1])  # big + small fits: may be read while 1 is in use
    assert log.seen[3] in ([], [2])


def test_map_tensors_hands_over_and_releases_under_the_budget():
    log = Log(5)
    got = dict(map_tensors(log.readers, lambda i, item: item.i * 10, pipelines=1, float32=False,
                           sizes=[READ_AHEAD_BYTES] * 5))
    assert got == {i: 10 * i for i in range(5)}
    assert all(alive == [] for alive in log.seen.values())


def test_a_reader_error_under_the_budget_is_raised_at_its_item():
    def bad():
        raise OSError("disk on fire")

    readers = [lambda: Item(0), bad, lambda: Item(2)]
    items = read_ahead(readers, sizes=[READ_AHEAD_BYTES] * 3)
    assert next(items).i == 0
    with pytest.raises(OSError, match="disk on fire"):
        next(items)


def test_pair_measurement_counts_both_stored_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
    path = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=1, dtype=torch.bfloat16)
    plan = plan_pieces(SourceRequest.of(str(path)), cache=False)
    pairs, _ = pair_tensors(plan, plan)
    m = PairMeasurement.make(None, 0.0, 4, "cpu")
    for tp in pairs:
        record = tp.base
        assert record.read_nbytes == record.read().numel() * 2  # bf16 as stored
    tp = next(tp for tp in pairs if tp.name.endswith("mlp.up_proj.weight"))
    work = m.lookup(open_cache("test", m.kind, enabled=False), tp)
    assert work.whole
    assert m.read_bytes(work) == 2 * tp.base.read().numel() * 2


def test_compare_is_unchanged_by_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", "off")
    base = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=2, dtype=torch.bfloat16, seed=1)
    tuned = write_tiny_checkpoint(tmp_path / "t", "llama", num_layers=2, dtype=torch.bfloat16, seed=2)
    ahead = toolkit.compare(base, tuned, progress=False, cache=False)
    monkeypatch.setattr(PairMeasurement, "read_ahead_bytes", 0)  # nothing read ahead
    one_by_one = toolkit.compare(base, tuned, progress=False, cache=False)
    for v in ahead.data_vars:
        assert ahead[v].equals(one_by_one[v]), v


def test_each_measurement_names_its_budget_and_the_pass_uses_it():
    from toolkit.collect.measure.weights import WeightMeasurement

    mlp_7b = 3584 * 18944  # entries of a Qwen2.5-7B mlp matrix
    # the weights pass holds the next 7B mlp matrix (float32) beside the current one; compare never holds
    # two 7B mlp pairs (bf16 as stored, both sides)
    assert 2 * mlp_7b * 4 <= WeightMeasurement.read_ahead_bytes < 2 * (8192 * 28672 * 4)
    assert PairMeasurement.read_ahead_bytes < 2 * (2 * mlp_7b * 2)
    size = WeightMeasurement.read_ahead_bytes // 2
    log = Log(3)
    items = read_ahead(log.readers, sizes=[size] * 3, budget=WeightMeasurement.read_ahead_bytes)
    first = next(items)
    for _ in range(100):  # read while item 0 is held here
        if 1 in log.seen:
            break
        threading.Event().wait(0.01)
    assert log.seen[1] == [0]
    del first
    assert consume(items) == [1, 2]
    log = Log(3)  # over the pairs' budget: one at a time
    assert consume(read_ahead(log.readers, sizes=[size] * 3, budget=PairMeasurement.read_ahead_bytes)) == [0, 1, 2]
    assert log.seen == {0: [], 1: [], 2: []}


def test_a_free_pipeline_claims_the_next_tensor_while_the_other_is_busy():
    """Tensor 0 holds its pipeline until four of tensors 1-5 are measured (its pipeline has read one ahead):
    the other pipeline must take them (a fixed share p, p + 2, ... left tensors 2 and 4 behind 0: only three)."""
    import threading
    import time

    import torch

    finished = {i: threading.Event() for i in range(6)}
    where = {}

    def work(i, item):
        where[i] = threading.current_thread().name
        finished[i].set()
        if i == 0:
            deadline = time.monotonic() + 30
            while sum(finished[j].is_set() for j in range(1, 6)) < 4:
                assert time.monotonic() < deadline, "tensors waited behind tensor 0 while a pipeline was free"
                time.sleep(0.01)
        return i

    readers = [(lambda i=i: torch.zeros(1) + i) for i in range(6)]
    torch.set_num_threads(2)
    got = dict(map_tensors(readers, work, pipelines=2, float32=False))
    assert got == {i: i for i in range(6)}
    assert sum(where[i] != where[0] for i in range(1, 6)) >= 4
