"""What a pass reads: a checkpoint's tensors, the (layer, component) cells cut from each, and pairs of them.

==============  ====================================================================
module          job
==============  ====================================================================
``types``       :class:`Plan` and :class:`PlannedTensor`, the plan's records
``planner``     :func:`plan_pieces`: open a source (or find its plan cached) and map it
``experts``     routed experts: one unit per expert slice; the experts a config declares
``cache``       plans kept on disk, so a cached call opens nothing
``cell_ids``    cache ids of stored tensors and of the cells cut from them
``pairs``       matching two checkpoints' tensors (``compare``)
``adapters``    a LoRA adapter in ``compare``: its base with ΔW merged in
==============  ====================================================================
"""

from toolkit.collect.plan.planner import plan_pieces, plan_source
from toolkit.collect.plan.types import Plan, PlannedTensor

__all__ = ["Plan", "PlannedTensor", "plan_pieces", "plan_source"]
