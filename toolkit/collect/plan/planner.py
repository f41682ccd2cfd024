"""Planning a pass over a checkpoint: which stored tensors hold which (layer, component) cells.

A plan costs what opening the checkpoint costs (for a GGUF file: transformers'
config, a meta-device model for the parameter names, a probe of its tensor
processor, 2-3 s). It is therefore cached (:mod:`toolkit.collect.plan.cache`)
under the identity of the files it was made from, and a cached plan opens
nothing: its tensors are read through the real source only when a cell is
not in the result cache.
"""

from __future__ import annotations

from dataclasses import replace

from toolkit.architectures import resolve_adapter
from toolkit.architectures.expected import missing_cells, naming, stored_pieces
from toolkit.collect.plan import cache as plan_cache
from toolkit.collect.plan.experts import check_dropped_experts, check_experts, planned_units
from toolkit.collect.plan.types import Plan
from toolkit.errors import UnmappedParametersError, UnsupportedArchitectureError
from toolkit.sources import SourceRequest, open_source
from toolkit.sources.base import Source


def plan_source(src: Source, mapping=None) -> Plan:
    """Map the tensors of an opened source to (layer, component) pieces.

    Raises
    ------
    UnmappedParametersError
        No tensor maps to a component; two tensors map to the same cell; or
        the layers found disagree with the config's ``num_hidden_layers``.
    UnsupportedArchitectureError
        No family for the config's ``model_type`` and no ``mapping``; when the
        folder has no ``config.json`` the message says so.
    """
    if not src.checks_identity_on_read:  # a cached plan's source checks when it opens
        src.check_unchanged()
    check_dropped_experts(src)
    all_records = list(src.tensors())
    names = [r.name for r in all_records]
    try:
        adapter = resolve_adapter(src.config, names, mapping=mapping)
    except UnsupportedArchitectureError as e:
        missing = src.missing_config
        if missing and not src.config.get("model_type"):
            raise UnsupportedArchitectureError(e.model_type, e.known, names, missing_config=missing) from None
        raise
    tensors, seen = [], {}
    for rec in all_records:
        pieces = stored_pieces(adapter, rec)  # its shape against the config's sizes first
        for p in pieces:
            key = p.key
            if key in seen:
                what = "" if p.expert is None else f" expert {p.expert}"
                raise UnmappedParametersError(
                    f"two parameters map to layer {p.layer} {p.component}{what}: {seen[key]!r} and {rec.name!r}; "
                    "fix the mapping so each component has one matrix per layer"
                )
            seen[key] = rec.name
        if pieces:
            tensors.extend(planned_units(rec, pieces))
    if not tensors:
        raise UnmappedParametersError(
            f"no parameter of {src.location!r} maps to an attention or MLP component "
            f"(model_type {src.config.get('model_type')!r}); is this a transformer checkpoint? "
            "Pass mapping=toolkit.Mapping({...}) for custom names",
            names,
        )
    if src.covers_every_layer:  # a LoRA adapter may adapt only some layers
        adapter.check_layers({key[0] for key in seen})
    check_experts(adapter, seen)
    return Plan(src, tensors, int(adapter.num_layers), adapter)


def plan_pieces(request, *, mapping=None, cache: bool = True) -> Plan:
    """Open the checkpoint ``request`` addresses (or find its plan in the cache) and map its tensors to
    (layer, component) pieces.

    Parameters
    ----------
    request : toolkit.sources.SourceRequest, or what :func:`toolkit.open_source` takes as ``source``
        The checkpoint's address and options (a bare source: with the default options).
    mapping : toolkit.Mapping, optional
        A user mapping (such plans are not cached).
    cache : bool, default True
        Look the plan up in, and store it into, the plan cache
        (:mod:`toolkit.collect.plan.cache`); only local files and folders
        with a built-in architecture are cached.

    Raises
    ------
    As :func:`plan_source`, and whatever :func:`toolkit.open_source` raises.
    """
    request = SourceRequest.of(request)  # its types checked before the cache
    cached_as = plan_cache.PlanRequest.of(request) if cache and mapping is None else None
    before = {}
    if cached_as is not None:
        cached = plan_cache.load(cached_as)
        if cached is not None:
            return with_missing(cached)
        before = cached_as.snapshot()
    src = open_source(request)
    with naming(src.location):  # a config that contradicts the weights: which checkpoint
        plan = plan_source(src, mapping)
    if cached_as is not None:
        plan_cache.store(cached_as, plan, before)
    return with_missing(plan)


def with_missing(plan: Plan) -> Plan:
    """``plan`` with the cells its family expects and the checkpoint lacks (:attr:`Plan.missing`), warned
    about once (:class:`~toolkit.errors.MissingTensorWarning`); a source that may cover only some
    layers (a LoRA adapter) has none."""
    import warnings

    from toolkit.errors import MissingTensorWarning, ToolkitError

    if not plan.source.covers_every_layer:
        return plan
    try:
        adapter = plan.adapter or resolve_adapter(plan.source.config)  # a cached plan keeps no adapter
    except ToolkitError:
        return plan
    missing = missing_cells(adapter, [p.key for t in plan.tensors for p in t.pieces], plan.num_layers)
    if missing:
        cells = ", ".join(f"layer {layer} {comp}" for layer, comp in missing[:6]) + (" ..." if len(missing) > 6 else "")
        warnings.warn(f"{plan.source.location}: {len(missing)} weight(s) of the {adapter.family} layers are missing "
                      f"from the checkpoint ({cells}); their cells are NaN (nan_reason 'tensor missing from the "
                      "checkpoint'). transformers would initialise them at random: is a shard or a tensor missing?",
                      MissingTensorWarning, stacklevel=3)
    return replace(plan, missing=tuple(missing))
