"""Notebook 05 runs headless, end to end, on the embedded model and data/heldout.txt (its QUICK setting)."""

import json
import math

import pytest

from _notebooks import ROOT, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "05_alpha_pruning.ipynb"


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources and "SOURCE = None" in sources and "load_held_out()" in sources
    assert 'os.environ.get("TOOLKIT_QUICK") == "1"' in sources
    assert "SPARSITIES = (0.5,) if QUICK else (0.5, 0.6, 0.7, 0.8)" in sources and "EPSILONS" in sources


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    # QUICK: one sparsity, one epsilon, 256 tokens (the full grid is benchmarks/bench_alpha_pruning.py); one torch
    # thread on 2 shared cores (see test_notebook_03).
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=300,
                      env={"TOOLKIT_OUT": out, "TOOLKIT_QUICK": 1, "OMP_NUM_THREADS": 1})
    images = [c for c in nb.cells if c.cell_type == "code"
              and any("image/png" in o.get("data", {}) for o in c.outputs)]
    assert len(images) == 3  # the metrics per layer, the allocations, the ratios to uniform
    record = json.loads((out / "alpha_pruning.json").read_text())
    assert record["quick"] is True and record["tokens"] == 256 and record["windows"] == 4
    dense = record["dense_perplexity"]
    assert 5 < dense < 200  # a working language model on English prose
    rows = record["rows"]
    assert {(r["pruner"], r["allocation"], r["metric"]) for r in rows} == {
        (p, "uniform", None) for p in ("magnitude", "wanda")} | {
        (p, "alpha", m) for p in ("magnitude", "wanda") for m in ("alpha", "alpha_peak")}
    for r in rows:
        assert r["sparsity"] == 0.5 and math.isfinite(r["perplexity"]) and r["perplexity"] > dense
        assert r["ppl_lo"] <= r["perplexity"] <= r["ppl_hi"]
        assert r["zeroed_share"] == pytest.approx(0.5, abs=2e-3)  # the budget (Wanda: int() of each row's share)
        if r["allocation"] == "alpha":
            assert r["lo"] <= r["ratio"] <= r["hi"]
    assert record["reading"].startswith("Of the 4 settings of the grid")
    text = "".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)
    assert record["reading"] in text  # the reading shown is the one saved
