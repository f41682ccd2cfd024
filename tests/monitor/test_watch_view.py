"""The live view of a watched run and its per-layer lines."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import xarray as xr  # noqa: E402

import toolkit  # noqa: E402
from toolkit.errors import EmptyInputError, UnknownMetricError  # noqa: E402
from toolkit.lab.vit import ViT  # noqa: E402
from toolkit.plot.layer_lines_figure import prepare_layer_lines  # noqa: E402
from toolkit.widgets.watch_view import WatchView  # noqa: E402


def _steps(model, monitor, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(0)
    for step in steps:
        x, y = torch.randn(4, 1, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        monitor.step(step)
    monitor.wait()


@pytest.fixture
def run(tmp_path):
    torch.manual_seed(0)
    model = ViT("softmax", dim=16, depth=3, heads=2)
    monitor = toolkit.watch(model, every=1, store=tmp_path / "run.watch")
    _steps(model, monitor, range(3))
    return model, monitor, tmp_path / "run.watch"


def test_layer_lines_are_the_records_values(run):
    _, monitor, _ = run
    ds = monitor.dataset
    data = prepare_layer_lines(ds, "frobenius_norm", "attn.qkv")
    assert list(data.x) == [0, 1, 2] and data.layers == (0, 1, 2)
    np.testing.assert_array_equal(data.values, ds.frobenius_norm.sel(component="attn.qkv").transpose("layer", "step"))
    with pytest.raises(UnknownMetricError):
        prepare_layer_lines(ds, "frobenius_norm", "mlp.up")
    with pytest.raises(EmptyInputError):
        prepare_layer_lines(ds.isel(step=[0]), "relative_change_since_start", "attn.qkv")  # NaN at the first


@pytest.mark.parametrize("kind", ["monitor", "store"])
def test_view_follows_the_newest_record_and_keeps_a_chosen_step(run, kind):
    model, monitor, store = run
    view = toolkit.widgets.explore(monitor if kind == "monitor" else store)
    assert isinstance(view, WatchView)
    assert list(view.slider.options) == [0, 1, 2] and view.slider.value == 2
    shown = view.explorer.ds
    assert "step" not in shown.dims and int(shown["step"]) == 2
    view.slider.value = 1
    assert int(view.explorer.ds["step"]) == 1 and not view.newest.value
    view.newest.value = True
    _steps(model, monitor, [3])
    assert view.refresh() and view.slider.value == 3 and int(view.explorer.ds["step"]) == 3
    view.slider.value = 0
    _steps(model, monitor, [4])
    assert view.refresh() and view.slider.value == 0  # not following: the chosen step stays
    assert list(view.slider.options) == [0, 1, 2, 3, 4]
    assert not view.refresh()  # nothing new


def test_exported_page_of_a_watched_run_has_a_panel_per_record(run, tmp_path):
    from toolkit.widgets.export import WATCH_PANELS, page_data

    _, monitor, store = run
    ds = toolkit.load(store)
    page = page_data(ds, metrics="frobenius_norm")
    spec = page["heatmaps"]["frobenius_norm"]
    assert [p["title"].split(":")[0] for p in spec["panels"]] == ["step 0", "step 1", "step 2"]
    long = xr.concat([ds.isel(step=0).expand_dims(step=[s]) for s in range(20)], dim="step")
    titles = [p["title"].split(":")[0] for p in page_data(long, metrics="frobenius_norm")["heatmaps"]
              ["frobenius_norm"]["panels"]]
    assert len(titles) == WATCH_PANELS and titles[0] == "step 0" and titles[-1] == "step 19"
    html = toolkit.widgets.export_html(ds, tmp_path / "run.html").read_text(encoding="utf-8")
    assert "<title>toolkit.watch of ViT</title>" in html  # the run's name, not its first step's
