"""Assembling per-cell results into the (layer, component) Dataset."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import xarray as xr

from toolkit._version import __version__
from toolkit.architectures.vocabulary import COMPONENTS, EXTRA_COMPONENTS
from toolkit.collect.assemble.experts import expert_grid, mean_note, split_cells
from toolkit.collect.cells import Cell, join_reasons


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
        ``(layer, component, expert)`` (:mod:`toolkit.collect.assemble.experts`).
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
