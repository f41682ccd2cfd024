"""Assembling per-cell results into the (layer, component) Dataset."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.architectures.vocabulary import COMPONENTS, EXTRA_COMPONENTS


@dataclass
class Cell:
    """Results for one (layer, component) matrix.

    ``values`` maps metric name to float (NaN where undefined); ``reasons``
    maps metric name to why it is NaN; ``errors`` names the metrics whose NaN
    came from an exception (a failure of the computation, not of the matrix),
    which are never cached; ``eigenvalues`` the stored spectrum (descending
    eigenvalues of WᵀW) when one was asked for.
    """

    parameter_name: str
    shape: tuple[int, int]
    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    errors: set = field(default_factory=set)
    eigenvalues: object = None

    @classmethod
    def measured(cls, parameter_name: str, result) -> Cell:
        """The Cell of a fresh :class:`~toolkit.metrics.evaluate.MatrixResult`."""
        return cls(parameter_name, result.shape, dict(result.values), dict(result.reasons), set(result.errors),
                   result.eigenvalues)


def cell_from(piece, shape, results: dict, metrics, keys: dict, eigenvalues=None) -> Cell:
    """The Cell of ``piece`` from cached results.

    Parameters
    ----------
    piece : toolkit.architectures.base.Piece
    shape : (int, int) or None
        The matrix shape (None: unknown, stored as (0, 0)).
    results : dict
        ``{cache key: (value, reason)}`` holding every metric's key.
    metrics : list of Metric
    keys : dict
        Metric name -> cache key.
    eigenvalues : sequence of float, optional
        The cell's spectrum.
    """
    cell = Cell(piece.parameter_name, tuple(shape) if shape else (0, 0), eigenvalues=eigenvalues)
    for m in metrics:
        value, reason = results[keys[m.name]]
        cell.values[m.name] = value
        if reason:
            cell.reasons[m.name] = reason
    return cell


def join_reasons(reasons: dict) -> str:
    """``"a, b: why; c: other"``: the metrics that share a reason named once with it, in order."""
    grouped: dict[str, list[str]] = {}
    for name, why in reasons.items():
        grouped.setdefault(why, []).append(name)
    return "; ".join(f"{', '.join(names)}: {why}" for why, names in grouped.items())


def cell_results(cell: Cell, metrics, keys: dict) -> tuple[dict, dict]:
    """``(results, cacheable)``: ``{cache key: (value, reason)}`` of ``metrics`` in a fresh
    ``cell``, and the same without the metrics that raised (``cell.errors``), which are
    shown but never cached (a failed computation is not a property of the matrix)."""
    results = {keys[m.name]: (cell.values[m.name], cell.reasons.get(m.name, "")) for m in metrics}
    return results, {keys[m.name]: results[keys[m.name]] for m in metrics if m.name not in cell.errors}


def build_grid_dataset(
    num_layers: int,
    cells: dict[tuple[int, str], Cell],
    metrics: list,
    attrs: dict,
    *,
    spectra: bool = False,
) -> xr.Dataset:
    """Build the Dataset with dims ``(layer, component)``.

    Parameters
    ----------
    num_layers : int
        Number of rows; layers are labelled ``0 .. num_layers - 1``.
    cells : dict
        ``{(layer, component): Cell}``; missing cells stay NaN with an empty
        ``parameter_name``. Routed experts of an MoE layer are keyed
        ``(layer, component, expert)`` (:mod:`toolkit.collect.experts`).
    metrics : list of toolkit.metrics.Metric
        One float64 data variable each, with the metric's attrs.
    attrs : dict
        Dataset attrs (source description); ``toolkit_version`` and
        ``created`` are added.
    spectra : bool, default False
        Add ``eigenvalues`` (layer, component, index) from the cells' spectra.

    Returns
    -------
    xarray.Dataset
        Data variables ``metric.name`` (layer, component) float64; coords
        ``parameter_name``, ``nan_reason`` (str) and ``n_rows``, ``n_cols``
        (int64, 0 where the model has no such matrix). With ``spectra``:
        ``eigenvalues`` (layer, component, index) float64, descending,
        NaN-padded to the longest spectrum. The component coordinate is the
        seven canonical components, then those of
        :data:`~toolkit.architectures.vocabulary.EXTRA_COMPONENTS` some cell
        has. With routed experts: ``<metric>_per_expert`` (layer, component,
        expert), coord ``parameter_name_per_expert``, the (layer, component)
        cell of an expert component the mean over its experts (no spectrum),
        attrs ``num_experts`` and ``moe_layers``.
    """
    from toolkit.collect.experts import expert_grid, mean_note, split_cells

    cells, routed = split_cells(cells)
    present = {key[1] for key in (*cells, *routed)}
    components = list(COMPONENTS) + [c for c in EXTRA_COMPONENTS if c in present]
    experts = expert_grid(routed, metrics, num_layers, components) if routed else None
    if experts is not None:
        cells = {**cells, **experts[0]}
    shape = (num_layers, len(components))
    data = {m.name: np.full(shape, np.nan) for m in metrics}
    pname = np.full(shape, "", dtype=object)
    reason = np.full(shape, "", dtype=object)
    n_rows = np.zeros(shape, dtype=np.int64)
    n_cols = np.zeros(shape, dtype=np.int64)
    col = {c: j for j, c in enumerate(components)}
    for (layer, comp), cell in cells.items():
        i, j = layer, col[comp]
        pname[i, j] = cell.parameter_name
        n_rows[i, j], n_cols[i, j] = cell.shape
        for m in metrics:
            data[m.name][i, j] = cell.values.get(m.name, np.nan)
        reason[i, j] = join_reasons(cell.reasons)
    dims = ("layer", "component")
    ds = xr.Dataset(
        {m.name: (dims, data[m.name], m.attrs()) for m in metrics},
        coords={
            "layer": ("layer", np.arange(num_layers), {"long_name": "layer (0 = closest to the embeddings)"}),
            "component": ("component", components),
            "parameter_name": (dims, pname.astype(str)),
            "nan_reason": (dims, reason.astype(str)),
            "n_rows": (dims, n_rows, {"long_name": "out_features"}),
            "n_cols": (dims, n_cols, {"long_name": "in_features"}),
        },
    )
    if spectra:
        ds["eigenvalues"] = _eigenvalues(num_layers, cells, components)
    if experts is not None:
        ds = ds.assign_coords(experts[1]["coords"]).assign(experts[1]["variables"])
        for m in metrics:
            ds[m.name].attrs["expert_reduction"] = mean_note(m.name, experts[2]["moe_layers"])
        attrs = {**attrs, **experts[2]}
    ds.attrs.update(attrs)
    ds.attrs["toolkit_version"] = __version__
    ds.attrs["created"] = datetime.now(UTC).isoformat(timespec="seconds")
    return ds


def _eigenvalues(num_layers: int, cells: dict, components: list[str]) -> xr.DataArray:
    """The ``eigenvalues`` variable: every cell's spectrum, descending, NaN-padded."""
    width = max((len(c.eigenvalues) for c in cells.values() if c.eigenvalues is not None), default=0)
    data = np.full((num_layers, len(components), width), np.nan)
    col = {c: j for j, c in enumerate(components)}
    for (layer, comp), cell in cells.items():
        if cell.eigenvalues is not None:
            data[layer, col[comp], : len(cell.eigenvalues)] = np.asarray(cell.eigenvalues, dtype=np.float64)
    return xr.DataArray(
        data, dims=("layer", "component", "index"),
        coords={"index": ("index", np.arange(width), {"long_name": "position in the spectrum (0 = largest)"})},
        attrs={"long_name": "eigenvalues of WᵀW (empirical spectral density)", "units": "1",
               "description": "lambda_i = sigma_i(W)^2, descending; NaN past a matrix's min(out, in) "
                              "eigenvalues and where no spectrum could be computed",
               "reference": "Martin & Mahoney 2021, JMLR 22(165)"},
    )
