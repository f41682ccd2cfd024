"""What a config implies about the stored tensors: each matrix's shape, and the components of each layer.

A config declares sizes (hidden size, head counts, expert counts, latent
ranks...) and ``transformers`` builds its model from them; a stored tensor
of another shape is a checkpoint that model cannot load, and a component a
layer should have but the checkpoint lacks is a weight ``transformers``
would initialise at random. Both are found here from the shapes alone,
before any tensor is read:

- :func:`stored_pieces` checks a stored tensor against the counts its
  family declares (:meth:`~toolkit.architectures.base.Adapter.check_stored`,
  e.g. the experts of a stack, *before* a piece per expert is made), then
  each piece's matrix against the shape its config implies
  (:meth:`~toolkit.architectures.base.Adapter.expected_shape`);
- :func:`missing_cells` lists the (layer, component) cells a family expects
  (:meth:`~toolkit.architectures.base.Adapter.expected_components`) and the
  checkpoint lacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from toolkit.errors import MappingError, UnmappedParametersError

__all__ = ["MISSING_REASON", "Expected", "missing_cells", "naming", "piece_shape", "product", "standard_shape",
           "stored_pieces"]

#: The reason a missing cell carries in a Dataset's ``nan_reason``.
MISSING_REASON = "tensor missing from the checkpoint"


@dataclass(frozen=True)
class Expected:
    """The (out, in) shape a config gives one component matrix; a side is None where the config does not say.

    Attributes
    ----------
    rows, cols : int or None
    keys : str
        The config keys it follows from (for the message).
    """

    rows: int | None
    cols: int | None
    keys: str

    def differs(self, shape: tuple[int, int]) -> bool:
        """Whether ``shape`` (out, in) contradicts the sides that are known."""
        return (self.rows is not None and shape[0] != self.rows) or (self.cols is not None and shape[1] != self.cols)


def product(*values) -> int | None:
    """The product of ``values``, None when one is not an integer (a size the config does not give)."""
    out = 1
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out *= v
    return out


#: (out, in) of the seven canonical components in Dims' terms, with the config keys behind them.
_ATTENTION = "num_attention_heads x head_dim, num_key_value_heads x head_dim, hidden_size"
_MLP = "intermediate_size, hidden_size"


def standard_shape(component: str, dims, intermediate: int | None = None) -> Expected | None:
    """The (out, in) of a canonical component of a llama-style block: q (heads·head_dim, hidden),
    k / v (kv_heads·head_dim, hidden), o (hidden, heads·head_dim), up / gate (intermediate, hidden),
    down (hidden, intermediate); None for any other component.

    Parameters
    ----------
    component : str
    dims : Dims
    intermediate : int, optional
        The MLP's width, default ``dims.intermediate_size`` (an expert's or a shared expert's size).
    """
    h = dims.hidden_size
    q = product(dims.num_attention_heads, dims.head_dim)
    kv = product(dims.num_key_value_heads, dims.head_dim)
    inter = dims.intermediate_size if intermediate is None else intermediate
    shapes = {"attn.q": (q, h, _ATTENTION), "attn.k": (kv, h, _ATTENTION), "attn.v": (kv, h, _ATTENTION),
              "attn.o": (h, q, _ATTENTION), "mlp.up": (inter, h, _MLP), "mlp.gate": (inter, h, _MLP),
              "mlp.down": (h, inter, _MLP)}
    found = shapes.get(component)
    return None if found is None else Expected(*found)


def piece_shape(piece, stored: tuple[int, ...]) -> tuple[int, int] | None:
    """The (out, in) shape of ``piece``'s matrix cut from a stored tensor of shape ``stored``, computed
    from the shapes (no read); None when its extract is not an :class:`~toolkit.architectures.base.Extract`
    or the stored tensor is not what it cuts from (the extract itself says why when it runs)."""
    from toolkit.architectures.base import Extract

    e = piece.extract
    if not isinstance(e, Extract):
        return None
    shape = tuple(int(d) for d in stored)
    if e.expert is not None:
        if len(shape) != 3:
            return None
        shape = shape[1:]
    if len(shape) != 2:
        return None
    rows, cols = shape[::-1] if e.transpose else shape
    if e.rows is not None and rows != e.rows:
        return None
    if isinstance(e.index, slice):
        rows = len(range(rows)[e.index])
    elif e.index is not None:
        rows = int(len(e.index))
    return rows, cols


def stored_pieces(adapter, record) -> list:
    """The pieces of a stored tensor, after checking its shape against the sizes the config declares.

    Parameters
    ----------
    adapter : Adapter
    record : TensorRecord
        Its ``name`` and ``shape`` (nothing is read).

    Returns
    -------
    list of Piece
        As :meth:`~toolkit.architectures.base.Adapter.pieces`.

    Raises
    ------
    MappingError
        The tensor contradicts a declared count (a stack of 4 experts where the config declares 10^7,
        checked before any piece is made) or a piece's matrix has another shape than the config gives
        its component (naming the parameter, both shapes and the config keys).
    """
    shape = tuple(int(d) for d in record.shape)
    adapter.check_stored(record.name, shape)
    pieces = adapter.pieces(record.name)
    for p in pieces:
        got = piece_shape(p, shape)
        want = adapter.expected_shape(p) if got is not None else None
        if want is not None and want.differs(got):
            shown = tuple("?" if v is None else v for v in (want.rows, want.cols))
            raise MappingError(
                record.name, f"the config gives {p.component} of layer {p.layer}"
                + (f" (expert {p.expert})" if p.expert is not None else "")
                + f" the shape (out, in) = ({shown[0]}, {shown[1]}) from {want.keys}, but the stored tensor "
                f"{shape} holds a {got[0]} x {got[1]} matrix; does the config belong to this checkpoint (sizes "
                "swapped or from another model)? Use the config.json published with these weights",
            )
    return pieces


def missing_cells(adapter, keys: Iterable[tuple], num_layers: int) -> list[tuple[int, str]]:
    """The (layer, component) cells the family expects in each layer and no stored tensor holds.

    Parameters
    ----------
    adapter : Adapter
    keys : iterable of tuple
        ``Piece.key`` of every piece found (``(layer, component[, expert])``).
    num_layers : int

    Returns
    -------
    list of (int, str)
        Sorted by layer, then in the vocabulary's order; empty where the family says nothing
        (:meth:`~toolkit.architectures.base.Adapter.expected_components` is None).
    """
    from toolkit.architectures.vocabulary import ALL_COMPONENTS

    found = {tuple(k[:2]) for k in keys}
    missing = []
    for layer in range(num_layers):
        expected = adapter.expected_components(layer)
        for comp in sorted(expected or (), key=ALL_COMPONENTS.index):
            if (layer, comp) not in found:
                missing.append((layer, comp))
    return missing


@contextlib.contextmanager
def naming(location: str):
    """Name the checkpoint ``location`` in a :class:`~toolkit.errors.MappingError` or
    :class:`~toolkit.errors.UnmappedParametersError` raised inside (a config that contradicts its
    weights, found while mapping them), unless the message names it already.

    Raises
    ------
    MappingError, UnmappedParametersError
        The same error, its message ending with the checkpoint.
    """
    try:
        yield
    except MappingError as exc:
        if location in exc.reason:
            raise
        raise MappingError(exc.key, f"{exc.reason} (checkpoint {location!r})") from None
    except UnmappedParametersError as exc:
        if location in exc.reason:
            raise
        raise UnmappedParametersError(f"{exc.reason} (checkpoint {location!r})", exc.names) from None
