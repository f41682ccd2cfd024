"""The option contract, round 4 (issue 43): each value that drifted from the contract is one
``InvalidOptionError`` naming the function and the option, before the checkpoint is opened."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import toolkit
import toolkit.plot
import toolkit.widgets
from toolkit.errors import InvalidOptionError, UnknownMetricError

MISSING = "/nonexistent/checkpoint"


def _ds():
    return xr.Dataset({"alpha": (("layer", "component"), np.arange(4.0).reshape(2, 2) + 2)},
                      coords={"layer": [0, 1], "component": ["attn.q", "attn.k"]})


def refused(where: str, option: str, call, *, match: str = ""):
    with pytest.raises(InvalidOptionError) as info:
        call()
    err = info.value
    assert (err.where, err.option) == (where, option), str(err)
    assert str(err).startswith(f"{where}: {option}="), str(err)
    if match:
        assert match in str(err), str(err)
    return err


def test_a_client_that_is_no_client():
    refused("toolkit.weight_stats", "client", lambda: toolkit.weight_stats(MISSING, client="not a client"))


@pytest.mark.parametrize("metrics", [[""], [1], [None], ["  "]])
def test_metric_names_that_are_no_names(metrics):
    refused("toolkit.weight_stats", "metrics", lambda: toolkit.weight_stats(MISSING, metrics))


def test_an_unknown_metric_names_the_function_and_the_option():
    err = refused("toolkit.weight_stats", "metrics", lambda: toolkit.weight_stats(MISSING, ["nope"]),
                  match="unknown metric 'nope'")
    assert isinstance(err, UnknownMetricError) and "stable_rank" in err.known
    refused("toolkit.compare", "metrics", lambda: toolkit.compare(MISSING, MISSING, ["stable_rank"]),
            match="is a weight metric")
    refused("toolkit.widgets.explore_model", "metrics",
            lambda: toolkit.widgets.explore_model(MISSING, ["nope"], display=False, background=False))


def test_compare_series_checkpoints_and_steps():
    refused("toolkit.compare_series", "checkpoints", lambda: toolkit.compare_series([]))
    refused("toolkit.compare_series", "steps", lambda: toolkit.compare_series([MISSING, MISSING], steps=[1]),
            match="1 steps for 2 checkpoints")
    refused("toolkit.compare_series", "steps", lambda: toolkit.compare_series([MISSING, MISSING], steps=[2, 1]),
            match="increasing")


@pytest.mark.parametrize("texts", [3, [], [3], [""], ["a", ""]])
def test_texts_are_checked_before_the_model_is_opened(texts):
    refused("toolkit.activation_stats", "texts", lambda: toolkit.activation_stats(MISSING, texts))


@pytest.mark.parametrize("call, where, option", [
    (lambda: toolkit.save(3, "x.nc"), "toolkit.save", "ds"),
    (lambda: toolkit.save(_ds().alpha, "x.nc"), "toolkit.save", "ds"),
    (lambda: toolkit.save(_ds(), 3), "toolkit.save", "path"),
    (lambda: toolkit.save(_ds(), ""), "toolkit.save", "path"),
    (lambda: toolkit.load(3), "toolkit.load", "path"),
])
def test_save_and_load_arguments(call, where, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(where, option, call)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("layers", [{0: 1}, {"a": 0}])
def test_a_dict_of_layers_is_refused_before_the_source_is_opened(layers):
    refused("toolkit.weight_stats", "layers", lambda: toolkit.weight_stats(MISSING, layers=layers))


def test_an_empty_component_name_is_named_as_given():
    err = refused("toolkit.weight_stats", "components", lambda: toolkit.weight_stats(MISSING, components=[""]))
    assert "components=['']" in str(err) and "('',)" not in str(err)


def test_a_missing_gpu_names_the_function(tmp_path, monkeypatch):
    import torch

    from toolkit.testing import write_tiny_checkpoint

    if torch.cuda.device_count() > 99:  # pragma: no cover
        pytest.skip("this machine has a 100th GPU")
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    ckpt = write_tiny_checkpoint(tmp_path / "ckpt", "llama")
    refused("toolkit.weight_stats", "device", lambda: toolkit.weight_stats(ckpt, ["frobenius_norm"],
                                                                           device="cuda:99", progress=False))


def test_a_bad_fit_field_names_the_front_door_and_fit():
    err = refused("toolkit.weight_stats", "fit", lambda: toolkit.weight_stats(MISSING, fit={"fix_fingers": "nope"}))
    assert "fix_fingers" in str(err) and "toolkit.FitOptions:" not in str(err)


def test_export_html_takes_one_metric_as_a_str(tmp_path):
    page = toolkit.widgets.export_html(_ds(), tmp_path / "p.html", metrics="alpha")
    assert '"metrics":["alpha"]' in page.read_text(encoding="utf-8")


def test_plot_options_are_in_the_contract():
    refused("toolkit.plot.heatmap", "center", lambda: toolkit.plot.heatmap(_ds(), "alpha", center="bogus"))
    refused("toolkit.plot.heatmaps", "figsize", lambda: toolkit.plot.heatmaps(_ds(), "alpha", figsize=(0, 3)))
    prepared = toolkit.plot.prepare_heatmap(_ds(), "alpha")
    refused("toolkit.plot.draw_heatmap", "annotate", lambda: toolkit.plot.draw_heatmap(prepared, annotate="no"))
    refused("toolkit.plot.draw_heatmap", "ax", lambda: toolkit.plot.draw_heatmap(prepared, ax="axes"))
    assert toolkit.plot.prepare_heatmap(_ds(), "alpha", center="median").center is not None


def test_lab_and_finetune_declare_their_options(tmp_path):
    import toolkit.finetune
    import toolkit.lab

    refused("toolkit.lab.run_experiment", "epochs", lambda: toolkit.lab.run_experiment(["softmax"], epochs=-1))
    refused("toolkit.lab.run_experiment", "dimm", lambda: toolkit.lab.run_experiment(["softmax"], dimm=3),
            match="no field of toolkit.lab.LabConfig")
    refused("toolkit.finetune.finetune", "lr", lambda: toolkit.finetune.finetune(tmp_path / "run", lr=0))
    refused("toolkit.finetune.finetune", "preset", lambda: toolkit.finetune.finetune(tmp_path / "run", preset="x"))
    assert not (tmp_path / "run").exists()


def test_the_cli_refuses_underscores_in_numbers(capsys):
    from toolkit.cli import main

    with pytest.raises(SystemExit) as info:
        main(["compare", MISSING, MISSING, "--k", "1_6"])
    assert info.value.code == 2 and "'1_6' is not a whole number" in capsys.readouterr().err
