"""Planning a pass over a checkpoint: which stored tensors hold which components."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.architectures import resolve_adapter
from toolkit.architectures.base import Piece
from toolkit.errors import UnmappedParametersError, UnsupportedArchitectureError
from toolkit.sources import open_source
from toolkit.sources.base import Source, TensorRecord


@dataclass
class Plan:
    """The component-bearing tensors of one checkpoint, in file order.

    Attributes
    ----------
    source : Source
    adapter : the architecture adapter used
    records : list of (TensorRecord, list of Piece)
        Only tensors that hold at least one component; the others are never read.
    num_layers : int
    """

    source: Source
    adapter: object
    records: list[tuple[TensorRecord, list[Piece]]]
    num_layers: int

    def cells(self) -> dict[tuple[int, str], tuple[TensorRecord, Piece]]:
        """``{(layer, component): (record, piece)}``."""
        return {(p.layer, p.component): (r, p) for r, ps in self.records for p in ps}

    def attrs(self) -> dict:
        """Dataset attrs describing where the numbers came from."""
        cfg = self.source.config
        dtypes = sorted({r.dtype for r, _ in self.records})
        return {
            "source": self.source.location,
            "format": self.source.format,
            "revision": self.source.revision or "",
            "fingerprint": self.source.fingerprint,
            "model_type": str(cfg.get("model_type", "")),
            "num_hidden_layers": int(self.num_layers),
            "storage_dtype": ",".join(dtypes),
        }


def plan_pieces(source, *, gguf_file=None, revision=None, mapping=None) -> Plan:
    """Open ``source`` and map its tensors to (layer, component) pieces.

    Raises
    ------
    UnmappedParametersError
        No tensor maps to a component; two tensors map to the same cell; or
        the layers found disagree with the config's ``num_hidden_layers``.
    UnsupportedArchitectureError
        No family for the config's ``model_type`` and no ``mapping``; when the
        folder has no ``config.json`` the message says so.
    (and whatever :func:`toolkit.sources.open_source` and
    :func:`toolkit.architectures.resolve_adapter` raise)
    """
    src = open_source(source, gguf_file=gguf_file, revision=revision)
    all_records = list(src.tensors())
    names = [r.name for r in all_records]
    try:
        adapter = resolve_adapter(src.config, names, mapping=mapping)
    except UnsupportedArchitectureError as e:
        missing = getattr(src, "missing_config", "")
        if missing and not src.config.get("model_type"):
            raise UnsupportedArchitectureError(e.model_type, e.known, names, missing_config=missing) from None
        raise
    records, seen = [], {}
    for rec in all_records:
        pieces = adapter.pieces(rec.name)
        for p in pieces:
            key = (p.layer, p.component)
            if key in seen:
                raise UnmappedParametersError(
                    f"two parameters map to layer {p.layer} {p.component}: {seen[key]!r} and {rec.name!r}; "
                    "fix the mapping so each component has one matrix per layer"
                )
            seen[key] = rec.name
        if pieces:
            records.append((rec, pieces))
    if not records:
        raise UnmappedParametersError(
            f"no parameter of {src.location!r} maps to an attention or MLP component "
            f"(model_type {src.config.get('model_type')!r}); is this a transformer checkpoint? "
            "Pass mapping=toolkit.Mapping({...}) for custom names",
            names,
        )
    layers = {layer for layer, _ in seen}
    adapter.check_layers(layers)
    return Plan(src, adapter, records, int(adapter.num_layers))
