"""Driving sources x architectures x metrics into Datasets: plan -> measure -> execute -> assemble.

``weight_stats(source)`` flows one way through four rooms: the front door
(:mod:`.weights`) checks the options, :mod:`.plan` opens the checkpoint (or
finds its plan cached) and lists the stored tensors and the (layer,
component) cells cut from each, :mod:`.measure` says how each unit is looked
up, measured (through the one evaluator) and stored, :mod:`.execute` runs
every unit once (cache lookup, executor, store, progress), and
:mod:`.assemble` turns the cells into the Dataset. ``compare`` and
``compare_series`` (:mod:`.compare`) take the same way with tensor pairs.

==================  ================================================================
module              job
==================  ================================================================
``weights``         :func:`weight_stats` and :func:`cell_spectrum`, for one checkpoint
``compare``         :func:`compare` and :func:`compare_series`, for two or more
``plan``            what a pass reads: tensors, cells, expert slices, pairs; the plan cache
``measure``         one Measurement per kind of unit (weights, factors, pairs; heads)
``execute``         :func:`run_pass`: lookup -> executor (this process or Dask) -> store
``assemble``        the Datasets: the grid, experts, heads, pairs, quality labels
``cells``           the :class:`Cell` record measuring and assembling share (a leaf)
``cache``           the on-disk result cache; each store declares its folder
``cache_folders``   ``cache_info`` and ``clear_cache`` over every declared folder
``progress``        tqdm bars and callbacks
==================  ================================================================
"""
