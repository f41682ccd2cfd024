"""How a family stores a parameter: (out, in) as ``nn.Linear``, or (in, out) as GPT-2's ``Conv1D``.

A LoRA update is added to its base weight in the base's storage orientation,
and ``peft`` decides that orientation by the type of the module it wraps
(``peft.tuners.lora.layer.dispatch_default``: ``fan_in_fan_out`` is turned
off for an ``nn.Linear`` and on for a ``Conv1D``, whatever the adapter
config says). The families declare which of their modules are stored
(in, out) (:attr:`~toolkit.architectures.adapter.FamilyAdapter.transposed`);
:func:`stored_transposed` reads that declaration for one parameter.
"""

from __future__ import annotations

from toolkit.errors import ToolkitError

__all__ = ["stored_transposed"]


def stored_transposed(config: dict, parameter_name: str) -> bool | None:
    """Whether the family of ``config`` stores ``parameter_name`` (in, out).

    Parameters
    ----------
    config : dict
        The base model's config (its ``model_type`` picks the family).
    parameter_name : str
        A weight's name in the base model (``model.layers.0.self_attn.q_proj.weight``).

    Returns
    -------
    bool or None
        True for a module of the family stored (in, out) (a ``Conv1D``),
        False for one stored (out, in) (an ``nn.Linear``), None when the
        family is not registered, its config cannot be read, or the name is
        none of its component matrices (nothing is known of it then).

    Examples
    --------
    >>> cfg = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 4}
    >>> stored_transposed(cfg, "transformer.h.0.attn.c_attn.weight"), stored_transposed(cfg, "lm_head.weight")
    (True, None)
    """
    from toolkit.architectures.resolve import resolve_adapter

    try:
        pieces = resolve_adapter(config).pieces(parameter_name)
    except ToolkitError:
        return None
    kinds = {getattr(p.extract, "transpose", None) for p in pieces}
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None
