"""``toolkit.summary``: means per component and for the model, flagged cells."""

from __future__ import annotations

import numpy as np
import pytest

import toolkit
from toolkit.testing import write_tiny_checkpoint


def test_summary_means_and_flags(tmp_path):
    ckpt = write_tiny_checkpoint(tmp_path / "m", "llama", num_layers=3, seed=15)
    ds = toolkit.weight_stats(ckpt, ["alpha", "stable_rank", "log_norm"], progress=False, cache=False,
                              quality_thresholds=(3.0, 3.5))
    s = toolkit.summary(ds)
    assert list(s.per_component.columns) == ["log_norm", "alpha", "stable_rank"]  # WeightWatcher's order
    for comp in ds.component.values:
        assert s.per_component.loc[comp, "alpha"] == pytest.approx(np.nanmean(ds.alpha.sel(component=comp).values))
    assert s.model["stable_rank"] == pytest.approx(np.nanmean(ds.stable_rank.values))
    q = ds.quality.values
    assert len(s.flagged) == int(((q != "ok") & (ds.n_rows.values > 0)).sum()) > 0
    row = s.flagged.iloc[0]
    assert ds.quality.sel(layer=row.layer, component=row.component).item() == row.quality != "ok"
    assert "flagged cells" in s._repr_html_() and "per component" in repr(s)
    with pytest.raises(toolkit.ToolkitError, match="not in the Dataset"):
        toolkit.summary(ds, ["kurtosis"])
