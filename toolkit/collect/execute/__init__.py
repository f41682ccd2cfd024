"""Running a measurement over a pass's units: the one loop, where units are measured, what workers run.

===============  ===============================================================
module           job
===============  ===============================================================
``run``          :func:`run_pass` (lookup -> executor -> store) and :func:`open_pass`
``executors``    where units are measured: this process or a Dask cluster
``remote``       what a Dask worker runs
``stream``       read-ahead pipelines sharing the cores
===============  ===============================================================
"""

from toolkit.collect.execute.executors import DaskExecutor, SerialExecutor, executor_for
from toolkit.collect.execute.run import Pass, open_pass, run_pass

__all__ = ["DaskExecutor", "Pass", "SerialExecutor", "executor_for", "open_pass", "run_pass"]
