"""Fixtures of the metric tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """One BLAS and torch thread, as a pass runs them (many small products with two threads on a loaded
    machine wait at barriers: the property tests of the fast routes ran 50x slower)."""
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        yield
    torch.set_num_threads(threads)
