"""The contract of an architecture adapter.

An adapter maps a checkpoint's parameter names (as ``transformers`` names them)
to ``(layer, canonical component)`` and says how to cut a fused tensor into
its components, with split sizes declared from the config, never guessed from
shapes. Every matrix an adapter hands out is in (out_features, in_features)
orientation, the ``nn.Linear`` convention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Piece:
    """One component matrix found inside one stored parameter.

    Attributes
    ----------
    layer : int
        Block index, 0 = closest to the embeddings.
    component : str
        One of :data:`toolkit.architectures.vocabulary.COMPONENTS`.
    parameter_name : str
        The stored parameter it comes from (a fused one for split pieces).
    extract : callable
        ``extract(tensor) -> tensor``: from the stored tensor (as
        ``TensorRecord.read()`` returns it) to this component's matrix,
        shape (out_features, in_features), same dtype.
    module_name : str
        Dotted path of the ``nn.Module`` in a loaded ``transformers`` model
        that owns the parameter (for forward hooks).
    out_index : slice or 1-D LongTensor or None
        Which output features of that module belong to this component
        (None: all of them). For gpt_neox per-head fused QKV this is an index
        tensor, not a slice.
    """

    layer: int
    component: str
    parameter_name: str
    extract: Callable[[torch.Tensor], torch.Tensor] = field(repr=False, compare=False)
    module_name: str = ""
    out_index: object = field(default=None, repr=False, compare=False)
