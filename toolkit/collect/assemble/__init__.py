"""Cells into Datasets: the (layer, component) grid and what rides on it.

=============  =================================================================
module         job
=============  =================================================================
``grid``       :func:`build_grid_dataset`, the (layer, component) Dataset
``experts``    the ``expert`` dimension: per-expert variables and their means
``heads``      the ``head`` / ``kv_head`` variables of per-head statistics
``pairs``      the Dataset of a compared pair: grid, per-tensor and model totals
``quality``    fit options recorded, WeightWatcher's skip rules, ESD quality labels
=============  =================================================================
"""
