"""Integrations with training frameworks (the ecosystem's convention: ``transformers.integrations``).

:class:`WatchCallback` records a :func:`toolkit.watch` monitor from the ``transformers`` Trainer: gradient
norms before the optimizer step (``on_pre_optimizer_step``), the first record as training begins
(``on_train_begin``), a record after each step (``on_step_end``, at
``state.global_step``), the queue drained at the end of training. Every rank calls the monitor (FSDP
gathers are collectives); rank 0 records.
"""

from __future__ import annotations

from transformers import TrainerCallback

from toolkit.monitor.monitor import Monitor


class WatchCallback(TrainerCallback):
    """A ``TrainerCallback`` that feeds a :class:`~toolkit.monitor.Monitor`.

    Parameters
    ----------
    monitor : toolkit.monitor.Monitor
        From ``toolkit.watch(model, ...)`` on the model the Trainer trains.

    Examples
    --------
    >>> monitor = toolkit.watch(model, every=10, gradients=True, store="run.watch")   # doctest: +SKIP
    >>> trainer = Trainer(model, args, train_dataset=ds, callbacks=[WatchCallback(monitor)])  # doctest: +SKIP
    """

    def __init__(self, monitor: Monitor):
        if not isinstance(monitor, Monitor):
            from toolkit.errors import InvalidOptionError

            raise InvalidOptionError("monitor", monitor, "a toolkit.monitor.Monitor (toolkit.watch(model, ...))",
                                     "toolkit.integrations.WatchCallback")
        self.monitor = monitor

    def on_train_begin(self, args, state, control, **kwargs):
        self.monitor.step(state.global_step)  # the record the updates are measured from (0, or the resumed step)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.monitor.gradients and self.monitor.due(state.global_step + 1):
            self.monitor.capture_gradients()

    def on_step_end(self, args, state, control, **kwargs):
        self.monitor.step(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.monitor.wait()
