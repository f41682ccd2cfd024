"""The ``precision_served`` variable of ``weight_stats(precision="float32-certified")``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from toolkit.collect.cells import Cell

#: attrs of the ``precision_served`` variable.
SERVED_ATTRS = {
    "long_name": "precision that served the spectral metrics",
    "units": "1",
    "description": (
        "'float32': the float32 Gram matrix's eigenvalues, certified to give every spectral metric of the cell "
        "within its tolerance of the float64 value (alpha and its fit columns 1e-3 absolute; norms and ranks "
        "1e-5 relative, squared norms (xmin, xmax, the log norms) as a norm within 1e-5; counts exactly; "
        "toolkit.metrics.certificate.TOLERANCES); 'float64': the "
        "certificate did not hold and the whole cell was recomputed in float64 (for a mixture-of-experts cell: "
        "any of its experts); '': no spectral metric, or no such matrix"),
    "reference": ("Higham, Accuracy and Stability of Numerical Algorithms (2002) eq. 3.13; Weyl's theorem "
                  "(Horn & Johnson, Matrix Analysis, Thm 4.3.1); Halko, Martinsson & Tropp (2011) SIAM Rev. "
                  "53(2) Lemma 4.1; Clauset, Shalizi & Newman (2009) SIAM Rev. 51(4)"),
}


def with_precision_served(ds: xr.Dataset, cells: dict) -> xr.Dataset:
    """``ds`` with the string variable ``precision_served`` (layer, component) of ``cells``.

    Parameters
    ----------
    ds : xarray.Dataset
        With dims ``(layer, component)``.
    cells : dict
        ``{(layer, component): Cell}`` or ``{(layer, component, expert): Cell}``
        (:attr:`~toolkit.collect.cells.Cell.precision_served`); a cell outside ``ds`` is skipped.
    """
    layers = {int(v): i for i, v in enumerate(ds.layer.values)}
    comps = {str(v): j for j, v in enumerate(ds.component.values)}
    out = np.full((len(layers), len(comps)), "", dtype=object)
    for key, cell in cells.items():
        if not isinstance(cell, Cell) or key[0] not in layers or key[1] not in comps:
            continue
        i, j = layers[key[0]], comps[key[1]]
        if cell.precision_served == "float64" or not out[i, j]:
            out[i, j] = cell.precision_served or out[i, j]
    return ds.assign(precision_served=(("layer", "component"), out.astype(str), dict(SERVED_ATTRS)))
