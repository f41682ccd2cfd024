"""The contract of an architecture adapter.

An adapter maps a checkpoint's parameter names (as ``transformers`` names them)
to ``(layer, canonical component)`` and says how to cut a fused tensor into
its components, with split sizes declared from the config, never guessed from
shapes. Every matrix an adapter hands out is in (out_features, in_features)
orientation, the ``nn.Linear`` convention.

This module holds the data types (:class:`Piece`, :class:`Dims`,
:class:`Extract`) and the abstract :class:`Adapter`; fused splits live in
:mod:`toolkit.architectures.split`, the declarative family base and the
registry in :mod:`toolkit.architectures.adapter`, user mappings in
:mod:`toolkit.architectures.mapping`, and ``resolve_adapter`` in
:mod:`toolkit.architectures.resolve`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from toolkit.architectures.vocabulary import ALL_COMPONENTS
from toolkit.config_keys import normalize_config
from toolkit.errors import MappingError, UnmappedParametersError


@dataclass(frozen=True)
class Piece:
    """One component matrix found inside one stored parameter.

    Attributes
    ----------
    layer : int
        Block index, 0 = closest to the embeddings.
    component : str
        One of :data:`toolkit.architectures.vocabulary.ALL_COMPONENTS`.
    parameter_name : str
        The stored parameter it comes from (a fused one for split pieces).
    extract : callable
        ``extract(tensor) -> tensor``: from the stored tensor (as
        ``TensorRecord.read()`` returns it) to this component's matrix,
        shape (out_features, in_features), same dtype. An :class:`Extract`
        (picklable, so pieces can travel to Dask workers).
    module_name : str
        Dotted path of the ``nn.Module`` in a loaded ``transformers`` model
        that owns the parameter (for forward hooks). It is the name in the
        model class that wrote the checkpoint (``Gemma3ForConditionalGeneration``
        stores ``language_model.model.layers...`` but names its module
        ``model.language_model.layers...``); use :meth:`Adapter.find_module`
        when you loaded another class (``AutoModel`` without the task head).
    out_index : slice or 1-D LongTensor or None
        Which output features (last dimension) of that module's output belong
        to this component (None: all of them). For gpt_neox per-head fused QKV
        this is an index tensor, not a slice. The same index picks the
        component's entries of the module's bias.
    expert : int or None
        The routed expert (0 .. E-1) of a mixture-of-experts layer this
        matrix belongs to; None for every other matrix (attention, dense MLP,
        router, shared experts).
    """

    layer: int
    component: str
    parameter_name: str
    extract: Callable[[torch.Tensor], torch.Tensor] = field(repr=False, compare=False)
    module_name: str = ""
    out_index: object = field(default=None, repr=False, compare=False)
    expert: int | None = None

    @property
    def key(self) -> tuple:
        """The grid cell: ``(layer, component)``, or ``(layer, component, expert)`` for a routed expert."""
        return (self.layer, self.component) if self.expert is None else (self.layer, self.component, self.expert)


@dataclass(frozen=True, eq=False)
class Extract:
    """Stored tensor -> component matrix (out_features, in_features).

    Parameters
    ----------
    parameter_name : str
        For error messages.
    transpose : bool
        The tensor is stored (in, out) (GPT-2 ``Conv1D``); transpose first.
    index : slice or 1-D LongTensor or None
        Rows of the (out, in) matrix that belong to the component.
    rows : int or None
        Rows the whole (out, in) matrix must have, as the config declares for
        a fused tensor; checked before cutting.
    expert : int or None
        The stored tensor is a stack of experts, shape (E, ...); take
        ``tensor[expert]`` first (before transposing and cutting).

    Returns
    -------
    Calling it returns a contiguous tensor, shape (out_features, in_features),
    dtype of the input: the input itself when there is nothing to transpose
    or cut (no copy), else a copy.

    Raises
    ------
    MappingError
        The tensor is not 2-D (with ``expert``: not 3-D with more than
        ``expert`` entries), or its row count differs from ``rows``.
    """

    parameter_name: str
    transpose: bool = False
    index: object = None
    rows: int | None = None
    expert: int | None = None

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.expert is not None:
            if tensor.ndim != 3 or not 0 <= self.expert < tensor.shape[0]:
                raise MappingError(
                    self.parameter_name,
                    f"expert {self.expert} of a stack of experts needs a 3-D (experts, ...) tensor with more "
                    f"than {self.expert} entries, got shape {tuple(tensor.shape)}; does the config "
                    "belong to this checkpoint?",
                )
            tensor = tensor[self.expert]
        if tensor.ndim != 2:
            raise MappingError(
                self.parameter_name,
                f"a component must be a 2-D matrix, got shape {tuple(tensor.shape)}",
            )
        w = tensor.t() if self.transpose else tensor
        if self.rows is not None and w.shape[0] != self.rows:
            raise MappingError(
                self.parameter_name,
                f"the config declares {self.rows} fused output rows but the stored "
                f"tensor has shape {tuple(tensor.shape)}"
                + (" (stored (in, out), transposed first)" if self.transpose else "")
                + "; does the config belong to this checkpoint?",
            )
        if self.index is not None:
            w = w[self.index]
        return w.contiguous()


#: Field of :class:`Dims` -> the standard config key it reads.
_FIELDS = {
    "num_layers": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate_size": "intermediate_size",
}


def _size(key: str, value) -> int | None:
    """A config size as an int (None when absent); anything but a positive integer is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise MappingError(
            f"config {key}",
            f"the config declares {key}={value!r}"[:120] + "; sizes, layer and head counts must be positive "
            "integers. Fix the config (or use the config.json published with these weights)",
        )
    return value


@dataclass(frozen=True)
class Dims:
    """The sizes a config declares, under one set of names.

    Read by :meth:`from_config` from the standard keys of
    :func:`toolkit.config_keys.normalize_config` (the normaliser sources use),
    whatever the family calls them (``n_embd`` / ``hidden_size``, ``n_layer`` /
    ``num_hidden_layers``...). For a multimodal config with a ``text_config``
    (gemma3) the sizes come from ``text_config``. A size the config lacks is
    None.

    Attributes
    ----------
    num_layers, hidden_size, num_attention_heads, num_key_value_heads,
    head_dim, intermediate_size : int or None
        ``num_key_value_heads`` defaults to ``num_attention_heads`` (no GQA);
        ``head_dim`` to ``hidden_size // num_attention_heads`` (the
        ``transformers`` default); GPT-2's ``n_inner=None`` means
        ``4 * n_embd``.

    Raises
    ------
    MappingError
        (:meth:`from_config`) a size that is zero, negative or not an integer.
    """

    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None

    @classmethod
    def from_config(cls, config: dict) -> Dims:
        cfg = normalize_config(config, use_transformers=False)  # a source's config is normalised already
        return cls(**{field: _size(key, cfg.get(key)) for field, key in _FIELDS.items()})

    @property
    def q_rows(self) -> int:
        """Output rows of the query projection, ``num_attention_heads * head_dim``."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_rows(self) -> int:
        """Output rows of the key (and value) projection, ``num_key_value_heads * head_dim``."""
        return self.num_key_value_heads * self.head_dim


class Adapter:
    """Maps stored parameter names of one checkpoint to component pieces.

    Subclasses implement :meth:`_match`; everything else is shared.

    Attributes
    ----------
    family : str
        The config's ``model_type`` (``"mistral"``), or the user mapping's name.
    config : dict
        The config the adapter was built from.
    dims : Dims
        Sizes read from the config.
    num_layers : int
        ``num_hidden_layers`` from the config (or, for a config without it,
        one more than the largest layer index in the parameter names).
    """

    family: str = ""
    prefixes: tuple[str, ...] = ()

    def __init__(self, config: dict):
        self.config = dict(config)
        self.dims = Dims.from_config(self.config)
        self.num_layers = self.dims.num_layers
        self.family = str(self.config.get("model_type") or type(self).family or type(self).__name__)

    # -- to implement -------------------------------------------------------
    def _match(self, name: str) -> tuple[int, str, list[tuple[str, Extract, object]]] | None:
        """``(layer, module_name, [(component, extract, out_index), ...])`` or None."""
        raise NotImplementedError

    @property
    def components(self) -> tuple[str, ...]:
        """The canonical components this family has, in canonical order."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------
    def pieces(self, name: str) -> list[Piece]:
        """The component pieces stored in parameter ``name``.

        Parameters
        ----------
        name : str
            A stored parameter name (``model.layers.3.self_attn.qkv_proj.weight``).

        Returns
        -------
        list of Piece
            One per component the tensor holds (three for a fused QKV), in
            canonical order; ``[]`` for anything that is not a component
            matrix (norms, embeddings, biases, ``lm_head``, vision towers).
        """
        found = self._match(name)
        if found is None:
            return []
        layer, module_name, parts = found
        return [
            Piece(layer, comp, name, extract, module_name=module_name, out_index=index)
            for comp, extract, index in sorted(parts, key=lambda p: ALL_COMPONENTS.index(p[0]))
        ]

    def check_stored(self, name: str, shape: tuple[int, ...]) -> None:
        """Check a stored tensor's shape against the counts the config declares, before :meth:`pieces`
        enumerates anything from them (a stack of experts: its first dimension is the expert count).

        Raises
        ------
        MappingError
            The shape contradicts a declared count. The default checks nothing.
        """

    def expected_shape(self, piece: Piece):
        """The (out, in) shape the config gives ``piece``'s matrix, an
        :class:`~toolkit.architectures.expected.Expected`, or None when the family does not say
        (the default; a user mapping)."""
        return None

    def config_problems(self) -> list[str]:
        """What in the config would make the model ``transformers`` builds from it fail or compute
        nonsense (checked before building it for a forward pass); ``[]`` when nothing (the default)."""
        return []

    def expected_components(self, layer: int) -> tuple[str, ...] | None:
        """The components every checkpoint of this family holds in ``layer`` (a weight missing there is
        one ``transformers`` would initialise at random); None when the family does not say (the default)."""
        return None

    def map_names(self, names: Iterable[str]) -> dict[str, list[Piece]]:
        """``{name: pieces}`` for the names that hold at least one component."""
        return {n: ps for n in names if (ps := self.pieces(n))}

    def check_layers(self, found_layers: Iterable[int]) -> None:
        """Check that the layers holding components are exactly ``0 .. num_layers-1``.

        Parameters
        ----------
        found_layers : iterable of int
            Layer indices of every piece seen (repeats allowed).

        Raises
        ------
        UnmappedParametersError
            Some layer of the config has no component, or a component sits in
            a layer the config does not have. The message names both.
        """
        found = sorted(set(int(i) for i in found_layers))
        count = self.num_layers or 0
        if found and len(found) == count and found[0] == 0 and found[-1] == count - 1:
            return
        inside = [i for i in found if 0 <= i < count]
        extra = [i for i in found if not 0 <= i < count]
        bounds = [-1, *inside, count]  # the missing layers are the gaps (a declared 10^7 is never enumerated)
        missing = ", ".join(str(a + 1) if b - a == 2 else f"{a + 1}-{b - 1}"
                            for a, b in zip(bounds, bounds[1:], strict=False) if b - a > 1)
        raise UnmappedParametersError(
            f"{self.family}: the config says num_hidden_layers={self.num_layers} but components "
            f"were found in {len(found)} layers ({_ranges(found) or 'none'}); "
            f"missing layers: {missing or 'none'}; layers beyond the config: "
            f"{_ranges(extra) or 'none'}. Is the config from another checkpoint, or a shard missing?"
        )

    def find_module(self, model, piece_or_name):
        """The ``nn.Module`` of ``model`` that computes a piece.

        Tries the piece's ``module_name`` as is, then with the family's task
        prefixes (``model.``, ``transformer.``...) removed or swapped, so it
        works on ``AutoModel`` as well as on ``AutoModelForCausalLM``.

        Parameters
        ----------
        model : torch.nn.Module
        piece_or_name : Piece or str

        Raises
        ------
        MappingError
            No module of ``model`` has that name under any known prefix.
        """
        name = piece_or_name.module_name if isinstance(piece_or_name, Piece) else str(piece_or_name)
        prefixes = sorted({p for p in (*self.prefixes, "") if p is not None}, key=len, reverse=True)
        stems = [name] + [name[len(p):] for p in prefixes if p and name.startswith(p)]
        for stem in stems:
            for p in ("", *prefixes):
                try:
                    return model.get_submodule(p + stem)
                except AttributeError:
                    continue
        raise MappingError(name, f"no module of {type(model).__name__} has this name (tried prefixes {prefixes})")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.family!r} num_layers={self.num_layers}>"


def _ranges(xs: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out, xs = [], list(xs)
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ", ".join(out)
