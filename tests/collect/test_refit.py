"""Refitting the power-law columns from stored spectra equals measuring with those fit options."""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit.collect.refit import fit_metrics, refit
from toolkit.errors import ToolkitError
from toolkit.metrics.fit_options import FitOptions

NAMES = ["alpha", "alpha_xmin", "alpha_xmax", "num_pl_spikes", "alpha_ci_lower", "alpha_ci_upper", "stable_rank"]
FITTED = NAMES[:-1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    from toolkit.testing import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("refit") / "m", "llama", num_layers=2)
    return path, {fit: toolkit.weight_stats(path, NAMES, progress=False, cache=False, keep_spectra=True,
                                            fit=FitOptions(**dict(fit)), quality_thresholds=(2.5, 5.0))
                  for fit in ((), (("fix_fingers", "clip_xmax"),), (("xmax", 1),), (("fix_fingers", "xmin_peak"),))}


def test_the_fit_columns_are_those_that_read_the_spectrum(measured):
    _, runs = measured
    assert sorted(m.name for m in fit_metrics(runs[()])) == sorted(FITTED)


@pytest.mark.parametrize("fit", [(("fix_fingers", "clip_xmax"),), (("xmax", 1),), (("fix_fingers", "xmin_peak"),)])
def test_a_refit_equals_the_pass_measured_with_those_options(measured, fit):
    _, runs = measured
    got, want = refit(runs[()], dict(fit)), runs[fit]
    assert not np.array_equal(got.alpha.values, runs[()].alpha.values, equal_nan=True)  # the options matter here
    for name in NAMES:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    np.testing.assert_array_equal(got.nan_reason.values, want.nan_reason.values)
    np.testing.assert_array_equal(got.quality.values, want.quality.values)
    assert {k: v for k, v in got.attrs.items() if k.startswith("fit_")} == \
        {k: v for k, v in want.attrs.items() if k.startswith("fit_")}
    assert got.alpha.attrs["fit_options"] == want.alpha.attrs["fit_options"]
    np.testing.assert_array_equal(got.eigenvalues.values, runs[()].eigenvalues.values)  # the spectra stay


def test_refitting_back_gives_the_measured_numbers(measured):
    _, runs = measured
    back = refit(refit(runs[()], FitOptions(fix_fingers="clip_xmax")), None)
    for name in NAMES:
        np.testing.assert_array_equal(back[name].values, runs[()][name].values, err_msg=name)
    assert back.attrs["fit_fix_fingers"] == "none"


def test_a_reason_replaces_the_old_one_of_the_same_metric():
    import xarray as xr

    ds = xr.Dataset({"alpha": (("layer", "component"), [[np.nan, 2.0]])},
                    coords={"layer": [0], "component": ["attn.q", "attn.k"],
                            "nan_reason": (("layer", "component"), [["alpha: old; stable_rank: kept", ""]]),
                            "n_rows": (("layer", "component"), [[4, 4]]),
                            "n_cols": (("layer", "component"), [[4, 4]])})
    # layer 0 attn.q: 3 eigenvalues (too few for a fit); attn.k: none stored (no matrix): untouched
    ds["eigenvalues"] = (("layer", "component", "index"), [[[3.0, 2.0, 1.0], [np.nan] * 3]])
    out = refit(ds, {"xmax": 1})
    assert out.nan_reason.values[0, 0].startswith("stable_rank: kept; alpha: too short a spectrum: 2 eigenvalues")
    assert out.alpha.values[0, 1] == 2.0 and out.nan_reason.values[0, 1] == ""


def test_without_spectra_there_is_nothing_to_refit(measured):
    _, runs = measured
    with pytest.raises(ToolkitError, match="keep_spectra=True"):
        refit(runs[()].drop_vars("eigenvalues"), {"xmax": 1})
