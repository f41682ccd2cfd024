"""Notebook 05 runs headless, end to end, on the embedded model and data/heldout.txt (its QUICK setting)."""

import json
import math

import pytest

from _notebooks import ROOT, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "05_alpha_pruning.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources and "SOURCE = None" in sources and "load_held_out()" in sources
    assert 'os.environ.get("TOOLKIT_QUICK") == "1"' in sources and "SPARSITIES = (0.5,) if QUICK else (0.5, 0.7)" \
        in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    # QUICK: one sparsity, 128 tokens (the full run is benchmarks/bench_alpha_pruning.py); one torch thread on
    # 2 shared cores (see test_notebook_03).
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=300,
                      env={"TOOLKIT_OUT": out, "TOOLKIT_QUICK": 1, "OMP_NUM_THREADS": 1})
    images = [c for c in nb.cells if c.cell_type == "code"
              and any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(images) == 3  # mean alpha per layer, the allocations, perplexity against sparsity
    record = json.loads((out / "alpha_pruning.json").read_text())
    assert record["quick"] is True and record["tokens"] == 128
    dense = record["dense_perplexity"]
    assert 5 < dense < 200  # a working language model on English prose
    rows = {r["allocation"]: r for r in record["rows"]}
    assert sorted(rows) == ["alpha", "reverse alpha", "uniform"] and {r["sparsity"] for r in rows.values()} == {0.5}
    for r in rows.values():
        assert math.isfinite(r["perplexity"]) and r["perplexity"] > dense  # pruning half the weights costs
        assert r["zeroed_share"] == pytest.approx(0.5, abs=1e-4)  # the budget, met by every allocation
        assert len(r["layer_sparsity"]) == 30
    assert max(rows["uniform"]["layer_sparsity"]) == min(rows["uniform"]["layer_sparsity"]) == 0.5
    alpha_layers, reverse_layers = rows["alpha"]["layer_sparsity"], rows["reverse alpha"]["layer_sparsity"]
    assert max(alpha_layers) > 0.6 and min(alpha_layers) < 0.45  # spread over [1 - 0.2, 1 + 0.2] x budget
    assert alpha_layers.index(max(alpha_layers)) == reverse_layers.index(min(reverse_layers))  # the mirror
    assert record["reading"] and "50%" in record["reading"]
    text = "".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)
    assert record["reading"] in text  # the reading shown is the one saved
