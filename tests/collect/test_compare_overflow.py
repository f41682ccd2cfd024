"""float64 checkpoints whose entries make the pair's float64 sums overflow (|w| ~ 1e200) or subnormal
(~1e-300): every cell of compare is the unscaled pair's (power-of-two scaling, DiffContext.ratio_sums and the
Gram routes), never NaN with "0 NaN/Inf entries" nor "all zeros"; the cosine of huge matrices is NumPy's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import toolkit
from toolkit.metrics.diff import compute_diff_metrics
from toolkit.testing import write_tiny_checkpoint


def _scaled(path, scale):
    f = path / "model.safetensors"
    save_file({k: v * scale for k, v in load_file(f).items()}, f, metadata={"format": "pt"})
    return path


@pytest.mark.parametrize("scale", [2.0 ** 665, 2.0 ** -996])
def test_cells_of_a_pair_far_outside_floats_range_are_the_unscaled_pairs(tmp_path, monkeypatch, scale):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    metrics = ["relative_change", "cosine_similarity", "update_sparsity", "subspace_overlap",
               "subspace_overlap_sensitivity", "delta_stable_rank"]
    base = write_tiny_checkpoint(tmp_path / "b", "llama", num_layers=1, dtype=torch.float64)
    target = write_tiny_checkpoint(tmp_path / "t", "llama", num_layers=1, dtype=torch.float64, seed=1)
    want = toolkit.compare(str(base), str(target), metrics=metrics)
    got = toolkit.compare(str(_scaled(base, scale)), str(_scaled(target, scale)), metrics=metrics)
    assert "0 NaN/Inf" not in " ".join(got.nan_reason.values.ravel())
    for name in metrics:
        np.testing.assert_allclose(got[name].values, want[name].values, rtol=1e-9, atol=0, err_msg=name)


def test_cosine_of_huge_matrices_is_numpys():
    rng = np.random.default_rng(0)
    for scale in (1e-300, 1e-160, 1e100, 1e150):
        b, t = rng.standard_normal((2, 12, 9)) * scale
        got = compute_diff_metrics(torch.from_numpy(b), torch.from_numpy(t), ["cosine_similarity"])
        want = float((b / scale * (t / scale)).sum() / (np.linalg.norm(b / scale) * np.linalg.norm(t / scale)))
        assert abs(got["cosine_similarity"].value - want) <= 1e-12, scale
