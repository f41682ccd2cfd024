"""A pass watched while it runs: ``weight_stats(on_cells=...)``, the live explorer, Stop and Resume,
and a cell's spectrum computed when it is opened."""

import matplotlib

matplotlib.use("Agg")

import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import toolkit  # noqa: E402
from toolkit.errors import InvalidOptionError  # noqa: E402
from toolkit.testing import write_tiny_checkpoint  # noqa: E402
from toolkit.widgets import explore, explore_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("cache")
METRICS = ["frobenius_norm", "stable_rank"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("live") / "m", "llama", num_layers=3, seed=7)


def _measured(ds) -> int:
    return int((ds.parameter_name.values != "").sum())


def test_on_cells_hands_over_the_cells_finished_so_far(ckpt):
    seen = []
    ds = toolkit.weight_stats(ckpt, METRICS, progress=False, on_cells=lambda partial: seen.append(partial()))
    assert len(seen) == 21  # one call per stored tensor (3 layers x 7 matrices)
    counts = [_measured(p) for p in seen]
    assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] == 21
    for p in seen:  # laid out as the result from the first call on; the cells to come are NaN
        assert (p.sizes["layer"], p.sizes["component"]) == (ds.sizes["layer"], ds.sizes["component"])
        done = p.parameter_name.values != ""
        np.testing.assert_array_equal(p.frobenius_norm.values[done], ds.frobenius_norm.values[done])
        assert np.isnan(p.frobenius_norm.values[~done]).all()
    np.testing.assert_array_equal(seen[-1].stable_rank.values, ds.stable_rank.values)
    with pytest.raises(InvalidOptionError, match="on_cells"):
        toolkit.weight_stats(ckpt, METRICS, progress=False, on_cells="print")


def test_an_exception_from_on_cells_stops_the_pass_and_the_cache_resumes_it(ckpt, reads):
    class Enough(Exception):
        pass

    calls = []

    def stop_after_five(partial):
        calls.append(1)
        if len(calls) == 5:
            raise Enough

    with pytest.raises(Enough):
        toolkit.weight_stats(ckpt, METRICS, progress=False, on_cells=stop_after_five)
    first = len(reads)
    # the pass stopped at the exception; its pipelines measure ahead of the calling thread (on a busy machine they
    # may have read every tensor of this tiny model before on_cells was called a fifth time), so how many were
    # read is not a property of the pass; that none is read after the exception is (the pipelines are joined)
    assert len(calls) == 5 and 5 <= first <= 21
    time.sleep(0.2)
    assert len(reads) == first
    ds = toolkit.weight_stats(ckpt, METRICS, progress=False)
    again = reads[first:]
    assert len(again) <= 21 - 5 and _measured(ds) == 21  # the five finished tensors came from the cache


def test_the_live_explorer_fills_in_stops_and_resumes(ckpt, reads):
    stop_at, live = 6, None
    shown = []

    import toolkit.widgets._model as model_mod

    original = model_mod.ModelExplorer._show

    def watching(self, ds, *, final=False):
        original(self, ds, final=final)
        shown.append(_measured(ds))
        hover = self.explorer.facts[0].grid()
        texts = [t for row in hover for t in row if "not measured yet" in t]
        assert final or not texts or _measured(ds) < 21
        if len(shown) == stop_at:
            self.stop()

    model_mod.ModelExplorer._show = watching
    try:
        live = explore_model(ckpt, METRICS, refresh=0, background=False)
        assert live.state == "stopped" and live.first_cells_s is not None and len(live.updates) >= stop_at
        assert shown == sorted(shown) and shown[0] >= 1  # the cells arrived one tensor at a time
        partial = live.ds  # the finished cells, kept
        kept = _measured(partial)
        assert stop_at <= kept < 21 and "stopped" in partial.attrs
        assert "Resume" in live.form["stop"].description and "Stopped after" in live.progress.label.value
        assert "left" not in live.progress.detail.value  # no time left once stopped
        assert "not measured yet" in live.explorer.hover_text(2, "mlp.gate")
        before, on_screen = len(reads), len(shown)
        live.start(background=False)  # Resume: the finished cells come from the cache
    finally:
        model_mod.ModelExplorer._show = original
    # issue 36, item 4: the Resume showed its first cached cell in place of the cells on screen
    assert shown[on_screen:] and min(shown[on_screen:]) >= kept and shown == sorted(shown)
    assert live.state == "done" and _measured(live.ds) == 21
    assert len(reads) - before <= 21 - kept
    assert "Measured" in live.progress.label.value and live.explorer.pending is False
    assert "21 cells, 21 tensors in" in live.progress.label.value  # the whole run, not the Resume alone
    full = toolkit.weight_stats(ckpt, METRICS, progress=False)
    np.testing.assert_array_equal(live.ds.stable_rank.values, full.stable_rank.values)


def test_the_form_measures_another_selection(ckpt, tmp_path):
    live = explore_model(ckpt, METRICS, background=False, layers=[0])
    assert list(live.ds.layer.values) == [0]
    live.form["layers"].value = "1:3"
    live.form["components"].value = "attn.*"
    live.form["compute"].click()
    assert list(live.ds.layer.values) == [1, 2] and list(live.ds.component.values) == ["attn.q", "attn.k",
                                                                                        "attn.v", "attn.o"]
    assert live.explorer.current.rows == (1, 2) and live.explorer.current.cols == ("attn.q", "attn.k", "attn.v",
                                                                                   "attn.o")  # controls of this grid
    assert live.explorer.save_png(tmp_path / "grid.png").exists()  # the explorer's methods, on .explorer


def test_a_typo_in_the_model_box_keeps_the_heatmap_on_screen(ckpt, tmp_path):
    """Issue 36, item 5: a model that cannot be opened used to wipe the heatmap before the pass failed."""
    live = explore_model(ckpt, METRICS, background=False, layers=[0])
    shown, children = live.explorer, live.body.children
    assert shown is not None and children
    live.form["source"].value = str(tmp_path / "no-such-modle")
    live.form["compute"].click()
    assert live.state == "failed"
    assert live.explorer is shown and live.body.children == children  # the old heatmap stays
    assert "Could not compute" in live.progress.label.value and "still" in live.progress.detail.value
    assert live.progress.bar.description == "failed"
    live.form["source"].value = str(ckpt)  # the right name again: its cells replace the view
    live.form["compute"].click()
    assert live.state == "done" and live.explorer is not shown


@pytest.mark.parametrize("field,text", [("layers", "abc"), ("layers", "1.5"), ("layers", "0:2:1:3"),
                                        ("experts", "x"), ("components", "attn.q,,mlp.up")])
def test_form_text_that_is_no_selection_fails_the_panel(ckpt, field, text):
    """Junk in a form field is a typed error in the panel and from .ds, never the previous cells left on
    screen as the answer (a click handler's exception only reaches the log); a right value then works."""
    from safetensors.torch import load_file

    live = explore_model(ckpt, METRICS, background=False, layers=[0])
    assert list(live.ds.layer.values) == [0]
    live.form[field].value = text
    live.form["compute"].click()
    assert live.state == "failed" and "Could not compute" in live.progress.label.value
    with pytest.raises(InvalidOptionError, match=field):
        live.wait()
    live.form[field].value = ""
    live.form["layers"].value = "-1"
    live.form["compute"].click()
    w = load_file(str(ckpt / "model.safetensors"))["model.layers.2.self_attn.q_proj.weight"].double().numpy()
    assert live.state == "done" and list(live.ds.layer.values) == [2]
    assert float(live.ds.frobenius_norm.sel(layer=2, component="attn.q")) == pytest.approx(np.linalg.norm(w),
                                                                                           rel=1e-6)


def test_a_spectrum_is_computed_when_a_cell_is_opened(ckpt, reads):
    ds = toolkit.weight_stats(ckpt, METRICS, progress=False)  # no spectra kept
    ex = explore(ds)
    assert "to compute its spectrum" in ex.view.spec["hint"]
    before = len(reads)
    dd = ex.show_cell(1, "mlp.down", wait=True)
    assert dd.kinds[:2] == ["esd", "singular_values"], dd.notes
    assert "computing" not in ex.drill.spec.get("status", "")
    want = toolkit.weight_stats(ckpt, ["stable_rank"], progress=False, keep_spectra=True)
    lam = want.eigenvalues.sel(layer=1, component="mlp.down").values
    np.testing.assert_allclose(dd.eigenvalues, lam[~np.isnan(lam)])
    read_now = len(reads) - before
    ex.show_cell(0, "attn.q")
    again = ex.show_cell(1, "mlp.down", wait=True)  # cached in the explorer: no new read of that matrix
    assert again.kinds[:2] == ["esd", "singular_values"]
    assert reads[before + read_now:].count("model.layers.1.mlp.down_proj.weight") <= 1  # only its entries


def test_the_computing_state_is_shown_while_the_spectrum_is_read(ckpt, monkeypatch):
    import threading

    import toolkit.collect.weights as weights

    gate, real = threading.Event(), weights.cell_spectrum

    def slow(*args, **kws):
        gate.wait(30)
        return real(*args, **kws)

    monkeypatch.setattr(weights, "cell_spectrum", slow)
    ex = explore(toolkit.weight_stats(ckpt, METRICS, progress=False))
    dd = ex.show_cell(2, "attn.v")
    assert dd.kinds == ["entries"] and "computing the spectrum of layer 2 attn.v" in ex.drill.spec["status"]
    thread = ex.cell_panel.spectrum_thread()
    assert thread is not None and thread.is_alive()
    gate.set()
    thread.join(30)
    assert ex.cell.kinds == ["esd", "singular_values", "entries"] and ex.drill.spec["status"] == ""


def _cells_of(ds) -> set:
    names = ds.parameter_name
    return {(int(la), str(c)) for la in ds.layer.values for c in ds.component.values
            if names.sel(layer=la, component=c).item()}


def test_a_large_model_shows_its_smallest_matrices_first(ckpt, monkeypatch):
    """Issue 36, item 4: the first look measured layer 0's two smallest matrices, then the pass went on in
    file order (a 7B model's 3rd cell 27 s later), where the README promises the smallest matrices first:
    now the smallest kinds of every layer come first, then the rest."""
    import toolkit.widgets._model as model_mod
    import toolkit.widgets.live_plan as live_plan

    monkeypatch.setattr(live_plan, "FIRST_LOOK_ENTRIES", 0)  # the tiny model counts as large
    shown = []
    original = model_mod.ModelExplorer._show

    def watching(self, ds, *, final=False):
        original(self, ds, final=final)
        if not shown:
            shown.append(("hover", self.explorer.hover_text(2, "mlp.up"), ds.sizes["layer"]))
        shown.append(_cells_of(ds))

    monkeypatch.setattr(model_mod.ModelExplorer, "_show", watching)
    live = explore_model(ckpt, METRICS, refresh=0, background=False)
    plan = toolkit.collect.plan.plan_pieces(ckpt)
    sizes = sorted((int(np.prod(t.record.shape)), p.component) for t in plan.tensors for p in t.pieces
                   if p.layer == 0)
    smallest = {c for _, c in sizes[:2]}
    look = {(la, c) for la in range(3) for c in smallest}
    (_, hover, layers), views = shown[0], shown[1:]
    assert layers == 3 and "not measured yet" in hover  # the whole grid from the start
    first_other = next(i for i, v in enumerate(views) if v - look)
    assert views[first_other - 1] == look  # every layer's smallest matrices before any other cell
    assert all(v <= look for v in views[:first_other])
    assert live.state == "done" and _measured(live.ds) == 21
    assert live_plan.first_look(plan, {"layers": [1]}) is None  # a selection is measured as asked


def test_explore_given_a_checkpoint_measures_it_live(ckpt):
    from toolkit.widgets import ModelExplorer

    live = explore(ckpt, "stable_rank", layers=[2], background=False)
    assert isinstance(live, ModelExplorer) and live.state == "done"
    assert list(live.ds.layer.values) == [2] and live.explorer.controls["metric"].value == "stable_rank"
    with pytest.raises(TypeError, match="layers"):
        explore(live.ds, layers=[0])  # a Dataset is shown as it is: no selection to measure


def _panel(ckpt, **kws):
    from toolkit.widgets import ModelExplorer

    return ModelExplorer(ckpt, METRICS, refresh=0, stats_kws=kws)


def test_stop_says_stopping_at_once_and_the_final_line_is_the_whole_run(ckpt, monkeypatch):
    """Issue 36, item 4: Stop gave no sign for 8-21 s while a large tensor finished, the line kept a time
    left after the Stop, and the final line gave only the Resume's count and time."""
    from _gate import TIMEOUT, Gate
    from toolkit.widgets.live_pace import clock

    ticks = iter(range(0, 10**6, 7))  # a clock 7 s further at each look: the run's times are long
    panel = _panel(ckpt)
    panel.live.now = lambda: float(next(ticks))
    gate = Gate.on_progress(panel.live, 5)  # the pass's thread busy after its 5th tensor
    panel.start(background=True)
    try:
        assert gate.entered.wait(TIMEOUT)
        panel.form["stop"].click()
        assert "Stopping after the current tensor" in panel.progress.label.value  # at once
        assert "left" not in panel.progress.detail.value and panel.form["stop"].disabled
        assert panel.state == "running"
    finally:
        gate.open()
    panel.wait(TIMEOUT)
    first = panel.live.pace.elapsed()
    assert panel.state == "stopped" and "Stopped after" in panel.progress.label.value
    assert "left" not in panel.progress.detail.value and not panel.form["stop"].disabled
    assert panel.progress.bar.description == "stopped"  # it said "measuring" (issue 45, item 4)
    panel.form["stop"].click()  # Resume
    panel.wait(TIMEOUT)
    total = panel.live.pace.elapsed()
    assert panel.state == "done" and total > first
    label = panel.progress.label.value
    assert f"21 cells, 21 tensors in {clock(total)} over 2 segments (" in label, label  # each segment's time
    assert panel.progress.bar.description == "measured"
    assert panel.progress.detail.value.startswith("21 / 21 tensors") and "left" not in panel.progress.detail.value


def test_no_attribute_of_the_panel_waits_for_the_pass(ckpt, monkeypatch):
    """The panel's __getattr__ waited for the pass on any unknown name (``hasattr``, a typo, a notebook's
    tab completion held the kernel until the pass ended); what needs the result is asked for by name."""
    import threading

    from _gate import TIMEOUT, Gate

    gate = Gate.on_read(monkeypatch, 2)
    panel = _panel(ckpt).start(background=True)
    got = {}
    probe = threading.Thread(target=lambda: got.update(has=hasattr(panel, "save_png"), partial=panel.partial))
    try:
        assert gate.entered.wait(TIMEOUT)
        probe.start()
        probe.join(TIMEOUT)
        assert not probe.is_alive() and got["has"] is False
        assert panel.state == "running"
    finally:
        gate.open()
    assert _measured(panel.wait(TIMEOUT)) == 21 and panel.explorer.save_png is not None


def test_when_done_shows_a_placeholder_in_voila_and_fills_it_when_the_pass_ends(ckpt, monkeypatch):
    """Issue 36, item 4: notebook 01 in Voilà showed a spinner for 41 s, then everything at once: a later
    cell waited for ``.ds``. ``when_done`` shows its result later without holding the page."""
    from _gate import TIMEOUT, Gate
    from toolkit.widgets.deferred import Deferred

    monkeypatch.setenv("VOILA_KERNEL_ID", "test")
    gate = Gate.on_read(monkeypatch, 2)
    panel = _panel(ckpt).start(background=True)
    try:
        assert gate.entered.wait(TIMEOUT)
        later = panel.when_done(lambda ds: f"{ds.sizes['layer']} layers")
        assert isinstance(later, Deferred) and later.defer and panel.state == "running"
        assert "shown when the measuring" in str(later.output.outputs)
    finally:
        gate.open()
    panel.wait(TIMEOUT)
    assert [o.get("text") for o in later.output.outputs] == ["3 layers\n"]
    assert not panel.when_done(lambda ds: None).defer  # the pass has ended: shown in the cell itself
    monkeypatch.delenv("VOILA_KERNEL_ID")
    running = _panel(ckpt, layers=[0])
    assert not running.when_done(lambda ds: None).defer  # the pass is not running in the background


def test_a_deferred_explorer_fills_its_placeholder(ckpt, monkeypatch):
    """An explorer (it has ``_ipython_display_``) given to ``when_done`` goes into the placeholder as its MIME
    bundle; IPython's formatter would have displayed it beside the placeholder and left the placeholder empty."""
    from _gate import TIMEOUT, Gate
    from toolkit.widgets import explore

    monkeypatch.setenv("VOILA_KERNEL_ID", "test")
    gate = Gate.on_read(monkeypatch, 2)
    panel = _panel(ckpt).start(background=True)
    shown = {}
    try:
        assert gate.entered.wait(TIMEOUT)
        later = panel.when_done(lambda ds: shown.setdefault("ex", explore(ds, "stable_rank")))
        assert later.defer
    finally:
        gate.open()
    panel.wait(TIMEOUT)
    (out,) = later.output.outputs
    bundle = out["data"]
    assert out["output_type"] == "display_data"
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == shown["ex"].widget.model_id
    assert bundle["text/plain"].startswith("Explorer(") and "image/png" in bundle
