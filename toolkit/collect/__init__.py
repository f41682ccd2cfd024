"""Driving sources x architectures x metrics into Datasets, with one loop.

==================  ================================================================
module              job
==================  ================================================================
``weights``         :func:`weight_stats`, the front door for one checkpoint
``compare``         :func:`compare` and :func:`compare_series`, for two or more
``plan``            a checkpoint's tensors and the (layer, component) cells cut from them
``plan_cache``      plans kept on disk, so a cached call opens nothing
``pipeline``        the loop: lookup -> executor -> store -> assemble
``executors``       where units are measured: this process or a Dask cluster
``remote``          what a Dask worker runs
``weight_cells``    the unit of ``weight_stats``: one stored tensor
``pair_cells``      the unit of ``compare``: one stored tensor pair
``tensor_pairs``    matching two checkpoints' tensors
``cell_ids``        cache ids of tensors and cells
``cache``           the on-disk result cache
``stream``          read-ahead pipelines sharing the cores
``grid``            cells into the (layer, component) Dataset
``pair_dataset``    the Dataset of a comparison
``progress``        tqdm bars and callbacks
==================  ================================================================
"""
