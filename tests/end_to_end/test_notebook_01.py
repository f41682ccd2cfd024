"""Notebook 01 runs headless, end to end, on the embedded default model."""

import pytest

from _notebooks import ROOT, WIDGET_VIEW, committed_sources, run_notebook

NOTEBOOK = ROOT / "notebooks" / "01_weight_heatmaps.ipynb"


def saved_against_weightwatcher(path):
    """The saved Dataset holds the embedded model's numbers: Frobenius norm and alpha of every cell equal
    WeightWatcher 0.7.7's (its committed golden table) at the README's tolerance."""
    import math

    import toolkit
    from _golden import read_golden

    ds = toolkit.load(path)
    assert (ds.sizes["layer"], ds.sizes["component"]) == (30, 7)
    by_name = {r["longname"]: r for r in read_golden("ww_smollm2_default.csv")[1]}
    names = ds.parameter_name.values
    for i in range(30):
        for j in range(7):
            ww = by_name[str(names[i, j]).removesuffix(".weight")]
            cell = ds.isel(layer=i, component=j)
            assert float(cell.frobenius_norm) == pytest.approx(math.sqrt(ww["norm"]), rel=1e-6)
            assert float(cell.alpha) == pytest.approx(ww["alpha"], rel=1e-6)


def test_no_notebook_asks_to_edit_a_cell_voila_hides():
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert "edit this cell" not in committed_sources(notebook), notebook.name


def test_notebook_is_committed_without_outputs():
    sources = committed_sources(NOTEBOOK)
    assert "%matplotlib inline" in sources
    assert "Qwen/Qwen2.5-7B" in sources and "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B" in sources


def test_no_cell_after_the_live_panel_waits_for_the_pass():
    """Issue 36, item 4: Voilà showed notebook 01 as a spinner for 41 s, then everything at once, because a
    cell after ``explore_model`` waited for ``.ds`` (Voilà renders a page once its cells have run). What
    needs the finished Dataset is in a function given to ``live.when_done``, which does not hold the page."""
    import ast

    import nbformat

    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    start = next(i for i, c in enumerate(cells) if "explore_model(" in c)
    for source in cells[start + 1:]:
        for statement in ast.parse(source).body:
            if isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                continue  # run by when_done, once the pass has ended
            waits = [n.attr for n in ast.walk(statement) if isinstance(n, ast.Attribute) and n.attr in ("ds", "wait")]
            assert not waits, f"a cell waits for the pass at the top level: {ast.unparse(statement)}"
            # nor measures (or writes) another model: section 8's MoE model held the page 10-23 s in Voila
            called = {getattr(n.func, "attr", getattr(n.func, "id", "")) for n in ast.walk(statement)
                      if isinstance(n, ast.Call)}
            slow = called & {"weight_stats", "cell_spectrum", "activation_stats", "write_tiny_moe_checkpoint",
                             "explore"}
            assert not slow, f"a cell measures at the top level, holding Voila's page: {ast.unparse(statement)}"
    assert any("live.when_done(" in c for c in cells[start + 1:])


@pytest.mark.slow
def test_notebook_runs_headless(tmp_path, monkeypatch):
    out = tmp_path / "out"
    nb = run_notebook(NOTEBOOK, monkeypatch, timeout=300, env={"TOOLKIT_OUT": out})
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    explorer_cell = next(c for c in nb.cells if "explore_model(" in c.source)
    bundles = [o.data for o in explorer_cell.outputs if o.output_type == "display_data"]
    assert len(bundles) == 1, explorer_cell.outputs  # one panel, not a second copy as the result
    assert WIDGET_VIEW in bundles[0] and "image/png" in bundles[0]  # static fallback for viewers
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 3  # explorer fallback + single heatmap + side-by-side panels
    assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") and "image/png" not in o.data
                   for o in outputs if o.output_type == "display_data")
    saved_against_weightwatcher(out / "weight_stats.nc")
    table_cell = next(c for c in nb.cells if "def metric_table" in c.source)
    table = "".join(o.get("text", "") for o in table_cell.outputs if o.output_type == "stream")
    assert "Frobenius norm (dimensionless): " in table and "[1]" not in table, table  # as the README says
    summary_cell = next(c for c in nb.cells if "toolkit.summary(ds)" in c.source)
    html = "".join(o.get("data", {}).get("text/html", "") for o in summary_cell.outputs)
    assert 0 < html.count("<tr") <= 30  # a few short tables, not one row per flagged cell (about 3,000 px)
    moe_cell = next(c for c in nb.cells if "explore(moe" in c.source)
    printed = "".join(o.get("text", "") for o in moe_cell.outputs if o.output_type == "stream")
    assert "MoE layers: [1, 2, 3, 4, 5] | routed experts: 4" in printed  # DeepSeek-V3 layout: dense layer 0
    assert "'mlp.router'" in printed and "'mlp.shared.up'" in printed and "'attn.kv_a'" in printed
    moe_views = [o.data for o in moe_cell.outputs if "image/png" in o.get("data", {})]
    assert len(moe_views) == 1 and WIDGET_VIEW in moe_views[0]  # the MoE explorer, shown once (bars aside)
    experts_cell = next(c for c in nb.cells if "stable_rank_per_expert" in c.source)
    assert [o for o in experts_cell.outputs if "image/png" in o.get("data", {})]
    assert list(out.glob("*.png"))
