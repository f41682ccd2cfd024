"""How a unit of a pass is looked up, measured and stored: one Measurement per kind of unit.

Every measurement has the same four steps, driven by
:func:`toolkit.collect.execute.run_pass`: ``lookup(store, unit)`` (what the
cache holds), ``reader(work)`` (what to read), ``measure(work, tensor, memo)``
(compute what is missing: runs in a pipeline thread or on a Dask worker,
stores nothing) and ``finish(store, work, fresh)`` (store, give the cells);
every weight statistic goes through the one evaluator,
:func:`toolkit.metrics.evaluate.evaluate_matrix`. Each declares the cache
folder it stores in (``kind``).

===========  ======================================================================
module       measurement
===========  ======================================================================
``weights``  :class:`WeightMeasurement`: a stored tensor's cells (and their heads)
``lowrank``  :class:`LowRankMeasurement`: the same, from a LoRA module's factors
``pairs``    :class:`PairMeasurement`: a stored tensor pair of ``compare``
``heads``    :class:`HeadSpec`: the per-head part of a weight measurement
``work``     the lookups' records shared by all
===========  ======================================================================
"""

from toolkit.collect.measure.heads import HeadSpec
from toolkit.collect.measure.lowrank import LowRankMeasurement, measurement_for
from toolkit.collect.measure.pairs import PairMeasurement
from toolkit.collect.measure.weights import WeightMeasurement

__all__ = ["HeadSpec", "LowRankMeasurement", "PairMeasurement", "WeightMeasurement", "measurement_for"]
