"""Per-thread memo of what several metrics derive from one tensor.

Every metric of a cell is called with the same ``w`` and the same shared
singular values ``s`` (:func:`toolkit.metrics.evaluate.evaluate_matrix`); a
quantity that several metrics read (a power-law fit, a Marchenko-Pastur fit,
the spectrum of the shuffled matrix) is computed by the first and reused by
the others through a :class:`TensorMemo`.

A memo remembers the **last** tensor its thread saw, checked by identity
(a weak reference) and ``Tensor._version``, so an in-place change
recomputes and a new matrix evicts the old one. Each thread has its own slot
(two pipeline threads measure at once), so no lock is needed and no thread
ever reads another's values.
"""

from __future__ import annotations

import threading
import weakref

import torch


class TensorMemo(threading.local):
    """``memo.of(t)``: the dict of values already derived from ``t`` in this thread.

    Examples
    --------
    >>> memo = TensorMemo()
    >>> t = torch.ones(3)
    >>> memo.of(t)["total"] = 3.0
    >>> memo.of(t)
    {'total': 3.0}
    >>> memo.of(torch.ones(3))  # another tensor: a fresh dict
    {}
    """

    entry = None

    def of(self, t: torch.Tensor) -> dict:
        """The values memoised for ``t`` (a fresh dict, now the thread's slot, for a new tensor).

        An inference-mode tensor keeps no version counter: it gets a fresh,
        unremembered dict each time (no memo, never a stale value).
        """
        try:
            version = t._version
        except RuntimeError:
            return {}
        entry = self.entry
        if entry is None or entry[0]() is not t or entry[1] != version:
            entry = (weakref.ref(t), version, {})
            self.entry = entry
        return entry[2]

    def get(self, t: torch.Tensor, key, compute):
        """``compute()`` once per ``(t, key)``; a :class:`DegenerateMatrix` it raises is
        remembered and raised again (with the same reason) on the next call."""
        from toolkit.metrics.registry import DegenerateMatrix

        memo = self.of(t)
        if key not in memo:
            try:
                memo[key] = (compute(), None)
            except DegenerateMatrix as e:
                memo[key] = (None, e.reason)
        value, reason = memo[key]
        if reason is not None:
            raise DegenerateMatrix(reason)
        return value
