"""Assembling per-cell results into the (layer, component) Dataset."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.architectures.expected import MISSING_REASON
from toolkit.architectures.vocabulary import COMPONENTS, EXTRA_COMPONENTS
from toolkit.collect.assemble.experts import expert_grid, mean_note, split_cells
from toolkit.collect.assemble.layout import Grid
from toolkit.collect.cells import Cell, join_reasons


def build_grid_dataset(
    num_layers: int,
    cells: dict[tuple[int, str], Cell],
    metrics: list,
    attrs: dict,
    *,
    spectra: bool = False,
    layers=None,
    components=None,
    experts=None,
    missing=(),
) -> xr.Dataset:
    """Build the Dataset with dims ``(layer, component)``.

    Parameters
    ----------
    num_layers : int
        The model's layers, labelled ``0 .. num_layers - 1``: the rows unless ``layers`` is given.
    cells : dict
        ``{(layer, component): Cell}``; missing cells stay NaN with an empty
        ``parameter_name``. Routed experts of an MoE layer are keyed
        ``(layer, component, expert)`` (:mod:`toolkit.collect.assemble.experts`).
    metrics : list of toolkit.metrics.Metric
        One float64 data variable each, with the metric's attrs.
    attrs : dict
        Dataset attrs (source description); ``toolkit_version`` and
        ``created`` are added.
    spectra : bool, default False
        Add ``eigenvalues`` (layer, component, index) from the cells' spectra.
    layers : sequence of int, optional
        The rows (a selection of the layers, ascending); default all.
    components : sequence of str, optional
        The component coordinate (a selection, in the vocabulary's order); default below.
    experts : sequence of int, optional
        The ``expert`` coordinate of the routed experts (a selection); default ``0 ..`` the largest found.
    missing : iterable of (int, str), optional
        Cells the checkpoint lacks a weight for: their ``nan_reason`` says so
        (:data:`~toolkit.architectures.expected.MISSING_REASON`).

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
    cells, routed = split_cells(cells)
    if components is None:
        present = {key[1] for key in (*cells, *routed)}
        components = list(COMPONENTS) + [c for c in EXTRA_COMPONENTS if c in present]
    components = list(components)
    layers = list(range(num_layers)) if layers is None else [int(x) for x in layers]
    grid = Grid(layers, components)
    selected_experts = experts is not None
    experts = expert_grid(routed, metrics, grid, experts) if routed else None
    if experts is not None:
        cells = {**cells, **experts[0]}
    shape = (len(layers), len(components))
    data = {m.name: np.full(shape, np.nan) for m in metrics}
    pname = np.full(shape, "", dtype=object)
    reason = np.full(shape, "", dtype=object)
    n_rows = np.zeros(shape, dtype=np.int64)
    n_cols = np.zeros(shape, dtype=np.int64)
    for (layer, comp), cell in cells.items():
        i, j = grid.at(layer, comp)
        pname[i, j] = cell.parameter_name
        n_rows[i, j], n_cols[i, j] = cell.shape
        for m in metrics:
            data[m.name][i, j] = cell.values.get(m.name, np.nan)
        reason[i, j] = join_reasons(cell.reasons)
    for layer, comp in missing:
        if layer in grid.layers and comp in grid.components and (layer, comp) not in cells:
            i, j = grid.at(layer, comp)
            reason[i, j] = MISSING_REASON
    dims = ("layer", "component")
    ds = xr.Dataset(
        {m.name: (dims, data[m.name], m.attrs()) for m in metrics},
        coords={
            "layer": ("layer", np.asarray(layers, dtype=np.int64),
                      {"long_name": "layer (0 = closest to the embeddings)"}),
            "component": ("component", components),
            "parameter_name": (dims, pname.astype(str)),
            "nan_reason": (dims, reason.astype(str)),
            "n_rows": (dims, n_rows, {"long_name": "out_features"}),
            "n_cols": (dims, n_cols, {"long_name": "in_features"}),
        },
    )
    if spectra:
        ds["eigenvalues"] = _eigenvalues(grid, cells)
    if experts is not None:
        ds = ds.assign_coords(experts[1]["coords"]).assign(experts[1]["variables"])
        for m in metrics:
            ds[m.name].attrs["expert_reduction"] = mean_note(m.name, experts[2]["moe_layers"],
                                                             ds.expert.values if selected_experts else None)
        attrs = {**attrs, **experts[2], **({"num_experts": attrs["num_experts"]} if "num_experts" in attrs else {})}
    ds.attrs.update(attrs)
    ds.attrs["toolkit_version"] = __version__
    ds.attrs["created"] = datetime.now(UTC).isoformat(timespec="seconds")
    return ds


def _eigenvalues(grid: Grid, cells: dict) -> xr.DataArray:
    """The ``eigenvalues`` variable: every cell's spectrum, descending, NaN-padded."""
    width = max((len(c.eigenvalues) for c in cells.values() if c.eigenvalues is not None), default=0)
    data = np.full((len(grid.layers), len(grid.components), width), np.nan)
    for (layer, comp), cell in cells.items():
        if cell.eigenvalues is not None:
            i, j = grid.at(layer, comp)
            data[i, j, : len(cell.eigenvalues)] = np.asarray(cell.eigenvalues, dtype=np.float64)
    return xr.DataArray(
        data, dims=("layer", "component", "index"),
        coords={"index": ("index", np.arange(width), {"long_name": "position in the spectrum (0 = largest)"})},
        attrs={"long_name": "eigenvalues of WᵀW (empirical spectral density)", "units": "1",
               "description": "lambda_i = sigma_i(W)^2, descending; NaN past a matrix's min(out, in) "
                              "eigenvalues and where no spectrum could be computed",
               "reference": "Martin & Mahoney 2021, JMLR 22(165)"},
    )


def with_unselected(ds: xr.Dataset, selected) -> xr.Dataset:
    """``ds`` (a full grid) with ``nan_reason`` "not selected" in every empty cell the selection left out.

    Parameters
    ----------
    ds : xarray.Dataset
        With coords ``nan_reason`` and ``n_rows`` (layer, component).
    selected : toolkit.collect.plan.selection.Selected
    """
    if selected.everything:
        return ds
    keep = np.array([[selected.keeps_cell(int(layer), str(comp)) for comp in ds.component.values]
                     for layer in ds.layer.values], dtype=bool)
    reason = np.where(~keep & (ds.n_rows.values == 0), f"not selected ({selected.describe()})",
                      ds.nan_reason.values.astype(object))
    return ds.assign_coords(nan_reason=(("layer", "component"), reason.astype(str), ds.nan_reason.attrs))
