"""Running a pass over a checkpoint's tensors on every core the pass is given.

Three costs make up a pass besides bookkeeping: reading (or dequantising)
each stored tensor, converting it to float32, and measuring it. Here:

- Each tensor is read and converted in a background thread, one tensor
  ahead of the measuring (:func:`float32_stream`), so I/O and dequantising
  overlap with the statistics (NumPy and torch release the GIL in their
  kernels).
- Conversions go into float32 buffers reused from one tensor to the next
  (:class:`Workspace`): a fresh allocation per tensor would have each of its
  pages faulted in and zeroed by the kernel, which costs more than the
  conversion itself.
- The tensors are dealt to up to two independent pipelines (reader +
  measurer each), run in threads (:func:`map_tensors`). torch's thread
  budget (``torch.get_num_threads()``) is split between them: each
  measures with ``budget // pipelines`` intra-op threads (at least one),
  and NumPy's BLAS is held to the same count (threadpoolctl).
  Matrices of a few hundred rows do not scale across threads inside one
  factorisation, but two of them at once do; and OpenMP regions with more
  threads than free cores wait on a descheduled thread at every barrier
  (measured on 2 shared cores: Gram + eigvalsh with 2 intra-op threads next
  to a busy reader thread ran up to 10x slower than with 1).

Peak memory: per pipeline the item in use and the one read ahead, plus the
measuring's temporaries. An item is read ahead only while the two together
hold at most the pass's budget (``read_ahead_bytes``, when the caller gives the
items' sizes; each measurement names its own, :data:`READ_AHEAD_BYTES` by
default): under ``compare``'s 256 MiB a 7B-shaped mlp pair (272 MB as stored)
is read after the previous pair is released, so ``compare`` never holds two of
them (issue 38; reading it then costs a fraction of a second next to the minute
its Gram matrix takes), while the weights pass's 1 GiB
(:data:`toolkit.collect.measure.weights.WEIGHTS_READ_AHEAD_BYTES`) still reads
the next 7B mlp matrix (272 MB as float32) during the current one's, so a
remote read overlaps with the measuring.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import torch

#: Most pipelines a pass runs (bounds memory: each holds ~3 tensors).
MAX_PIPELINES = 2
#: Bytes the item in use and the next one may hold together for the next one to be read ahead
#: (:func:`read_ahead`'s ``sizes``), unless the caller gives its own ``budget``.
READ_AHEAD_BYTES = 256 << 20


class Workspace:
    """A float32 buffer reused from one tensor to the next."""

    def __init__(self):
        self._buf: torch.Tensor | None = None

    def float32(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as float32: ``t`` itself when it is float32 already (or not on
        the CPU), else a view of the buffer, valid until the next call; a float64
        ``t`` that float32 cannot hold is returned as it is, for the evaluator to
        say so (:func:`toolkit.metrics.evaluate.float32_range_reason`)."""
        from toolkit.metrics.evaluate import float32_range_reason

        if t.dtype == torch.float32 or t.device.type != "cpu" or not t.is_floating_point():
            return t.to(torch.float32)
        if float32_range_reason(t):
            return t
        n = t.numel()
        if self._buf is None or self._buf.numel() < n:
            self._buf = None  # free the old one first
            self._buf = torch.empty(n, dtype=torch.float32)
        out = self._buf[:n].view(t.shape)
        out.copy_(t)
        return out


def float32_stream(readers: Iterable[Callable[[], torch.Tensor] | None],
                   sizes: Iterable[int] | None = None, budget: int | None = None,
                   ahead: Callable[[], bool] | None = None) -> Iterator[torch.Tensor | None]:
    """Call each reader and yield its tensor as float32, one tensor read ahead.

    Parameters
    ----------
    readers : iterable of callables or None
        ``reader()`` returns a tensor (e.g. ``TensorRecord.read``); None yields
        None without reading.
    sizes : iterable of int, optional
    budget : int, optional
    ahead : callable, optional
        As :func:`read_ahead`.

    Yields
    ------
    torch.Tensor or None
        Float32, in the order of ``readers``. A yielded tensor may be a view
        of a reused buffer: it is valid until the generator is advanced
        again, so use it (and drop it) before asking for the next one.
        An exception raised by a reader is raised here, at its tensor.
    """
    spaces = (Workspace(), Workspace())
    return read_ahead(readers, lambda reader, k: spaces[k].float32(reader()), sizes, budget, ahead)


def read_ahead(readers: Iterable[Callable[[], object] | None],
               load: Callable[[Callable[[], object], int], object] | None = None,
               sizes: Iterable[int] | None = None, budget: int | None = None,
               ahead: Callable[[], bool] | None = None) -> Iterator[object]:
    """Yield ``load(reader, k)`` for each reader, computed one reader ahead in a background thread.

    ``k`` alternates 0, 1 (which of two reusable buffers to fill); ``load``
    defaults to calling the reader. None readers yield None. An exception
    raised by a reader is raised here, at its item.

    ``sizes`` (bytes each item holds once loaded, aligned with ``readers``): an
    item is loaded while the previous one is in use only when the two sizes add
    up to at most ``budget`` (bytes; None: :data:`READ_AHEAD_BYTES`); otherwise it is
    loaded when asked for, after the generator has dropped the previous one (the
    caller must have dropped its own reference too). None: every item is read ahead.

    ``ahead``: asked before each item is yielded; False leaves the next reader untaken (``readers`` not
    advanced) until the caller asks for the next item. :func:`map_tensors`'s pipelines take their
    tensors from one shared order as they advance ``readers``, so near the end a pipeline busy with a
    long tensor must not take the next one ahead of a free pipeline. None: always ahead.
    """
    load = load or (lambda reader, k: reader())
    budget = READ_AHEAD_BYTES if budget is None else budget
    items = zip(readers, sizes, strict=True) if sizes is not None else ((r, 0) for r in readers)

    def call(reader, k):
        return None if reader is None else load(reader, k)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolkit-read") as pool:
        k = 0
        pending = deferred = None
        first = next(items, None)
        if first is not None:
            pending, size = pool.submit(call, first[0], k), first[1]
        try:
            while pending is not None:
                now = ahead is None or ahead()
                nxt = next(items, None) if now else None
                current = pending
                k ^= 1
                pending = deferred = None
                if nxt is not None and size + nxt[1] <= budget:
                    pending = pool.submit(call, nxt[0], k)
                else:
                    deferred = nxt
                value = current.result()
                del current
                yield value
                del value  # before a deferred item is loaded
                if not now:  # taken only now that the caller is done with the last one
                    nxt = deferred = next(items, None)
                if deferred is not None:
                    pending = pool.submit(call, deferred[0], k)
                if nxt is not None:
                    size = nxt[1]
        finally:
            if pending is not None:
                pending.cancel()


_END = object()  # the end of a pipeline's stream (a None reader's item is None)


def map_tensors(readers: Sequence[Callable[[], torch.Tensor]], work: Callable[[int, torch.Tensor], object],
                *, pipelines: int | None = None, float32: bool = True, sizes: Sequence[int] | None = None,
                read_ahead_bytes: int | None = None,
                thread_context: Callable[[], AbstractContextManager] | None = None) -> Iterator[tuple[int, object]]:
    """``work(i, float32 tensor of readers[i])`` for every i, on parallel pipelines.

    Parameters
    ----------
    readers : sequence of callables
        ``readers[i]()`` returns tensor i in any float dtype.
    work : callable
        ``work(i, tensor) -> result``; must not keep ``tensor`` (a reused
        buffer) beyond the call.
    pipelines : int, optional
        Threads measuring at once (default: ``min(2, torch.get_num_threads())``);
        each reads its own tensors ahead in a further thread.
    float32 : bool, default True
        Convert each tensor to float32 in the read-ahead thread. False hands
        ``work`` whatever the reader returned (e.g. a pair of stored tensors).
    sizes : sequence of int, optional
        Bytes each reader's item holds once read: bounds the read-ahead
        (:func:`read_ahead`). None: every item is read ahead.
    read_ahead_bytes : int, optional
        The budget of those sizes (:func:`read_ahead`'s ``budget``; None: :data:`READ_AHEAD_BYTES`).
    thread_context : callable, optional
        ``thread_context()`` gives a context manager that each pipeline thread
        holds open while it measures (e.g.
        :func:`toolkit.metrics.spectral.reuse_buffers`).

    Yields
    ------
    (i, result)
        In completion order (a free pipeline claims the next index in order: a pipeline that drew large
        tensors takes fewer, where a fixed share p, p + P, ... left one pipeline idle while the other
        measured three times its work on a Qwen2.5-7B-shaped layer).
        An exception raised by a reader or by ``work`` is raised here; the
        other pipelines then stop after their current tensor.
    """
    budget = torch.get_num_threads()
    n = max(1, min(pipelines or MAX_PIPELINES, budget, len(readers)))
    if not readers:
        return
    done: queue.Queue = queue.Queue()
    stop = threading.Event()

    def pipeline(p: int) -> None:
        try:
            with thread_context() if thread_context is not None else nullcontext():
                measure_mine(p)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            done.put((None, None, exc))
        finally:
            done.put((None, None, None))  # this pipeline is finished

    order = iter(range(len(readers)))  # claimed one index at a time by whichever pipeline is free
    claim = threading.Lock()
    taken = [0]

    def claimed(mine: deque) -> Iterator[int]:
        while not stop.is_set():
            with claim:
                i = next(order, None)
                taken[0] += i is not None
            if i is None:
                return
            mine.append(i)
            yield i

    def ahead() -> bool:
        """Read ahead only while at least two tensors a pipeline are left: the last ones go to whichever
        pipeline is free (a tensor read ahead waits for its pipeline's current one; traced on a
        Qwen2.5-7B-shaped layer: q waited 9.7 s behind an MLP matrix while the other pipeline was idle)."""
        return len(readers) - taken[0] >= 2 * n

    def measure_mine(p: int) -> None:
        mine: deque = deque()  # indices this pipeline claimed, in the order its read-ahead loads them
        ids, ids_for_sizes = itertools.tee(claimed(mine))
        tensors = (float32_stream if float32 else read_ahead)(
            (readers[i] for i in ids), sizes=None if sizes is None else (sizes[i] for i in ids_for_sizes),
            budget=read_ahead_bytes, ahead=ahead)
        try:
            while not stop.is_set():
                tensor = next(tensors, _END)
                if tensor is _END:
                    break
                i = mine.popleft()
                done.put((i, work(i, tensor), None))
                del tensor  # no zip: its reused result tuple would keep the last item while the next is read
        finally:
            tensors.close()

    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    intra = max(1, budget // n)
    torch.set_num_threads(intra)  # threads started below take this as their budget
    # NumPy's BLAS (Gram matrices, chunked sums), entered as a context so that
    # threadpoolctl hands back its control of OpenBLAS's process-wide pool at the end.
    blas = threadpool_limits(limits=intra, user_api="blas")
    blas.__enter__()
    threads = [threading.Thread(target=pipeline, args=(p,), name=f"toolkit-pass-{p}", daemon=True) for p in range(n)]
    try:
        for t in threads:
            t.start()
        running = n
        while running:
            i, result, exc = done.get()
            if exc is not None:
                raise exc
            if i is None:
                running -= 1
                continue
            yield i, result
    finally:
        stop.set()
        for t in threads:
            t.join()
        blas.__exit__(None, None, None)
        torch.set_num_threads(before)
