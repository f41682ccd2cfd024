"""``resolve_adapter``: the adapter of a checkpoint, from its config's family or from a user mapping."""

from __future__ import annotations

from collections.abc import Mapping as AbcMapping
from collections.abc import Sequence

from toolkit.architectures.adapter import family_adapter, registered_architectures
from toolkit.architectures.base import Adapter
from toolkit.architectures.mapping import Mapping
from toolkit.errors import MappingError, UnsupportedArchitectureError


def resolve_adapter(config: dict, parameter_names: Sequence[str] = (), mapping=None) -> Adapter:
    """The adapter for a checkpoint, from its config (or from a user mapping).

    Parameters
    ----------
    config : dict
        The ``transformers`` config as a dict; ``model_type`` picks the family.
    parameter_names : sequence of str
        Every stored parameter name; used for the error message and, when the
        config has no layer count, to count the layers.
    mapping : Mapping or dict, optional
        A user :class:`~toolkit.architectures.Mapping` (a plain dict is
        turned into one); it wins over the registered family.

    Returns
    -------
    Adapter

    Raises
    ------
    UnsupportedArchitectureError
        No mapping given and no family registered for ``model_type``; the
        message lists the parameter names and how to pass a mapping.
    MappingError
        A declared split needs a size the config lacks, a size of the config
        is not a positive integer, or ``config`` is not a dict.

    Notes
    -----
    It does not check the layer count: call :meth:`Adapter.check_layers`
    with the layers of every piece once all names are mapped.

    Examples
    --------
    >>> cfg = {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 32,
    ...        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}
    >>> a = resolve_adapter(cfg, [])
    >>> [(p.component, p.out_index) for p in a.pieces("model.layers.1.self_attn.qkv_proj.weight")]
    [('attn.q', slice(0, 32, None)), ('attn.k', slice(32, 48, None)), ('attn.v', slice(48, 64, None))]
    """
    if not isinstance(config, AbcMapping):
        raise MappingError("config", f"the config must be a dict (a config.json's content), not a "
                           f"{type(config).__name__}; pass {{}} when there is none")
    if mapping is not None:
        if not isinstance(mapping, Mapping):
            mapping = Mapping(dict(mapping))
        adapter = mapping.adapter(config)
    else:
        model_type = config.get("model_type")
        cls = family_adapter(model_type)
        if cls is None:
            raise UnsupportedArchitectureError(model_type, registered_architectures(), list(parameter_names))
        adapter = cls(config)
    if adapter.num_layers is None:
        layers = [p.layer for n in parameter_names for p in adapter.pieces(n)]
        adapter.num_layers = max(layers) + 1 if layers else 0
    return adapter
