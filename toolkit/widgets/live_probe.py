"""This machine's speed for the singular values, probed before a live pass of large matrices.

A live pass of a large model starts with its smallest matrices (the first look: a 7B model's ``attn.k`` and
``attn.v``, every layer), all of one smaller side, and from tensors of one side the clock cannot tell
reading from spectra (:mod:`toolkit.widgets.live_clock`), while the larger matrices to come differ from
them in exactly that split (a 7B ``mlp.down`` costs 37x an ``attn.k`` in entries and about 260x in
singular values). :func:`probe_rates` times the two parts of the pass's float64 route on this machine, as
the pass runs them (one BLAS and torch thread per pipeline, the pipelines at once): a Gram product
(NumPy's ``x @ x.T``) and the eigenvalues of a symmetric matrix (``torch.linalg.eigvalsh``), each in thread
CPU time. Wall time read 1.4-2x slow whenever another process shared the cores for that moment (a probe at
the end of a test run); CPU time read the recorded pass's own rates (2.5e-11 s per multiply-add, 8.5e-11 s
per n³) on a quiet machine and with a training run busy on both cores alike. Load that lasts slows the pass
and not the probe: the clock's fit scales the probe's rates once the pass has measured two shapes.
"""

from __future__ import annotations

import functools
import threading
import time

from toolkit.widgets.live_clock import ProbeRates

#: The probe's Gram product: (rows, columns), the product of the smaller side (BLAS blocks as the large
#: matrices' run; 0.11 s for two at once on the 2-core benchmark machine).
PROBE_GRAM = (1024, 4096)
#: The order of the probe's eigenvalue problem: large enough that the tridiagonal reduction runs out of the
#: cache as a 7B matrix's does (per n^3: 1.2e-10 s at 1024, 8.1e-11 at 1536, 8.3e-11 at 3584 in a recorded
#: pass; 0.3 s for two at once).
PROBE_EIG = 1536


@functools.lru_cache(maxsize=4)
def probe_rates(precision: str = "float64") -> ProbeRates:
    """Seconds per Gram unit and per eigenvalue unit on one pipeline, with the pass's pipelines at once.

    Memoised per precision for the process (about 0.4 s on two cores).

    Parameters
    ----------
    precision : {"float64", "float32", "float32-certified"}
        The pass's (``weight_stats(precision=...)``): the Gram product is timed in float32 for the float32
        routes, the eigenvalues in float64 for all.

    Returns
    -------
    ProbeRates
    """
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from toolkit.collect.execute.stream import MAX_PIPELINES

    pipelines = max(1, min(MAX_PIPELINES, torch.get_num_threads()))
    rng = np.random.default_rng(0)
    m, n = PROBE_GRAM
    x = rng.standard_normal((m, n)).astype(np.float64 if precision == "float64" else np.float32)
    a = rng.standard_normal((PROBE_EIG, PROBE_EIG))
    sym = torch.from_numpy(a + a.T)
    with threadpool_limits(limits=1, user_api="blas"):
        gram = _at_once(pipelines, lambda: x @ x.T)
        eig = _at_once(pipelines, lambda: torch.linalg.eigvalsh(sym))
    return ProbeRates(gram / (m * m * n), eig / PROBE_EIG ** 3, pipelines)


def _at_once(k: int, work) -> float:
    """Seconds of ``work()`` on one of ``k`` threads running it at once, one torch thread each: the largest
    thread CPU time (``time.thread_time``), which another process's load on the cores does not lengthen as
    it does the wall time (the pass's pipelines each have a core of their own)."""
    import torch

    spent = [0.0] * k

    def run(i: int) -> None:
        torch.set_num_threads(1)
        start = time.thread_time()
        work()
        spent[i] = time.thread_time() - start

    threads = [threading.Thread(target=run, args=(i,), name=f"toolkit-probe-{i}", daemon=True) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(max(spent), 1e-9)
