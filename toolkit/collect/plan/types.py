"""A plan's records: the stored tensors of a pass and the (layer, component) cells cut from each.

Made by :mod:`toolkit.collect.plan.planner`, kept on disk by
:mod:`toolkit.collect.plan.cache`, read by the measurements and the assembly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from toolkit.architectures.base import Piece
from toolkit.collect.plan.selection import Selected, Selection
from toolkit.sources.base import Source, TensorRecord


@dataclass(frozen=True)
class PlannedTensor:
    """One stored tensor that holds at least one grid cell.

    Attributes
    ----------
    record : TensorRecord
    pieces : tuple of Piece
        The (layer, component) cells cut from it (three for a fused QKV).
    """

    record: TensorRecord
    pieces: tuple[Piece, ...]


@dataclass
class Plan:
    """The component-bearing tensors of one checkpoint, in file order.

    Attributes
    ----------
    source : Source
        The opened checkpoint, or a :class:`~toolkit.collect.plan.cache.PlannedSource`
        that opens it only when a tensor is read.
    tensors : list of PlannedTensor
        Only tensors that hold at least one component; the others are never read.
    num_layers : int
    adapter : the architecture adapter used (None for a plan read from the cache)
    selected : Selected
        What :meth:`select` kept (everything by default).
    model_components : tuple of str
        Every component of the model, in the vocabulary's order (also those a selection left out).
    missing : tuple of (int, str)
        The (layer, component) cells the family expects and no stored tensor holds
        (:func:`~toolkit.architectures.expected.missing_cells`).
    """

    source: Source
    tensors: list[PlannedTensor]
    num_layers: int
    adapter: object = field(default=None, repr=False)
    selected: Selected = field(default_factory=Selected)
    model_components: tuple = ()
    missing: tuple = ()
    #: The whole model's routed experts per layer, kept by :meth:`select` (None: count them in ``tensors``).
    model_experts: int | None = None

    def __post_init__(self):
        if not self.model_components:
            from toolkit.architectures.vocabulary import ALL_COMPONENTS

            present = {p.component for t in self.tensors for p in t.pieces}
            self.model_components = tuple(c for c in ALL_COMPONENTS if c in present)

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer (the largest expert index + 1; 0 for a dense model)."""
        found = [p.expert for t in self.tensors for p in t.pieces if p.expert is not None]
        return 1 + max(found) if found else 0

    @property
    def experts_in_model(self) -> int:
        """The whole model's routed experts per MoE layer (:attr:`num_experts` counts those selected)."""
        return self.num_experts if self.model_experts is None else self.model_experts

    def select(self, selection: Selection) -> Plan:
        """The plan of the selected cells only (tensors holding none are left out, so never read).

        Raises
        ------
        SelectionError
            A layer, component or expert the model does not have.
        """
        if selection.everything:
            return self
        chosen = selection.resolve(self.num_layers, self.model_components, self.num_experts)
        tensors = []
        for t in self.tensors:
            kept = tuple(p for p in t.pieces if chosen.keeps(p))
            if kept:
                tensors.append(PlannedTensor(t.record, kept))
        if not tensors:
            from toolkit.errors import SelectionError

            layers = chosen.layers if chosen.layers is not None else range(self.num_layers)
            held = sorted({p.component for t in self.tensors for p in t.pieces if p.layer in layers},
                          key=self.model_components.index)
            raise SelectionError("selection", chosen.describe(), "no matrix of the model is in it; the selected "
                                 f"layers hold {', '.join(held) or 'nothing'}")
        return replace(self, tensors=tensors, selected=chosen, model_experts=self.experts_in_model)

    def grid(self, fill: bool = False) -> dict:
        """The coordinates of this plan's Dataset (:func:`~toolkit.collect.assemble.grid.build_grid_dataset`'s
        ``layers``, ``components``, ``experts``): the selected ones, or with ``fill`` the whole model's."""
        from toolkit.architectures.vocabulary import ALL_COMPONENTS, COMPONENTS

        have = {*self.model_components, *(comp for _, comp in self.missing)}  # a missing router keeps its column
        whole = list(COMPONENTS) + [c for c in ALL_COMPONENTS if c in have and c not in COMPONENTS]
        sel = self.selected
        if fill or sel.everything:
            return {"components": whole, "missing": self.missing}
        return {"layers": sel.layers, "components": [c for c in whole if sel.components is None
                                                     or c in sel.components], "experts": sel.experts,
                "missing": self.missing}

    @cached_property
    def value_identity(self) -> str:
        """What the numbers of this plan's cells depend on besides the cell itself: the bytes
        (the source fingerprint), the config that says how they become matrices (quantisation,
        fused split sizes, head counts, dtype: all of it, so any edit is a miss), the format,
        the toolkit's reading code and the decoding libraries."""
        from toolkit.collect.cache import code_identity, digest

        return digest(self.source.fingerprint, self.source.config, self.source.format,
                      self.source.decoder_versions(), code_identity("sources"))

    def attrs(self) -> dict:
        """Dataset attrs describing where the numbers came from."""
        cfg = self.source.config
        dtypes = sorted({t.record.dtype for t in self.tensors})
        return {
            **self.source.extra_attrs(),  # quantisation; a LoRA adapter's rank, alpha, base...
            **({"selection": self.selected.describe()} if not self.selected.everything else {}),
            "source": self.source.location,
            "format": self.source.format,
            "revision": self.source.revision or "",
            "fingerprint": self.source.fingerprint,
            "model_type": str(cfg.get("model_type", "")),
            "num_hidden_layers": int(self.num_layers),
            "storage_dtype": ",".join(dtypes),
            **({"num_experts": int(self.experts_in_model)} if self.experts_in_model else {}),
        }
