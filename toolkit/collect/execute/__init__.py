"""Running a measurement over a pass's units: the one loop, where units are measured, what workers run.

===============  ===============================================================
module           job
===============  ===============================================================
``run``          :func:`run_pass` (lookup -> executor -> store) and :func:`open_pass`
``measurement``  the ``Measurement`` protocol run_pass drives
``executors``    where units are measured: this process or a Dask cluster
``remote``       what a Dask worker runs
``stream``       read-ahead pipelines sharing the cores
===============  ===============================================================
"""

from toolkit.collect.execute.executors import DaskExecutor, SerialExecutor, executor_for
from toolkit.collect.execute.measurement import Measurement
from toolkit.collect.execute.run import Pass, open_pass, run_pass

__all__ = ["DaskExecutor", "Measurement", "Pass", "SerialExecutor", "executor_for", "open_pass", "run_pass"]
