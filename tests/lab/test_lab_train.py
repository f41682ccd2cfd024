"""The lab's training loop: the fast preset trains, saves, resumes and obeys the bound."""

import math

import numpy as np
import pytest
import xarray as xr

from toolkit.lab import PAPER_ACTIVATIONS, RESULT_PATH, LabConfigMismatchError, main, run_experiment
from toolkit.lab.dataset import read_netcdf

EXACT = ["attention_norm_head", "attention_norm_max", "train_loss", "train_accuracy", "test_loss",
         "test_accuracy", "skipped_steps"]


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab") / "fast.nc"
    ds = run_experiment(PAPER_ACTIVATIONS, out=out, preset="fast")
    return ds, out


def test_fast_preset_writes_the_documented_dataset(fast_run):
    ds, out = fast_run
    assert ds["activation"].values.tolist() == ["softmax", "x/1", "x/16", "x³/1", "x³/16"]
    assert ds["activation_name"].values.tolist() == ["softmax", "x/1", "x/16", "x^3/1", "x^3/16"]
    assert dict(ds.sizes) == {"activation": 5, "epoch": 4, "layer": 12, "head": 2}
    assert ds["layer"].values.tolist() == list(range(12))
    assert ds["attention_norm"].dims == ("activation", "epoch", "layer")
    assert ds["attention_norm_head"].dims == ("activation", "epoch", "layer", "head")
    assert ds["test_accuracy"].dims == ("activation", "epoch")
    assert ds["completed_epochs"].values.tolist() == [3] * 5
    for name, var in ds.data_vars.items():
        assert {"long_name", "units", "description", "reference"} <= set(var.attrs), name
    assert ds.attrs["num_tokens"] == 17 and ds.attrs["sqrt_n_bound"] == pytest.approx(math.sqrt(17))
    assert all(isinstance(v, (str, int, float, np.integer, np.floating)) for v in ds.attrs.values())
    on_disk = read_netcdf(out)  # the same numbers, labels and attrs after the round trip
    xr.testing.assert_identical(on_disk.drop_attrs(deep=False), ds.drop_attrs(deep=False))
    assert on_disk.attrs == ds.attrs
    assert np.isfinite(ds["test_accuracy"]).all() and np.isfinite(ds["epoch_time"][:, 1:]).all()


def test_softmax_every_head_within_sqrt_n_at_every_epoch(fast_run):
    ds, _ = fast_run
    sm = ds.sel(activation="softmax")
    bound = math.sqrt(ds.attrs["num_tokens"])
    assert float(sm["attention_norm_max"].max()) <= bound + 1e-9  # largest over the batch, every head
    assert float(sm["attention_norm_head"].min()) >= 1 - 1e-9  # rows summing to 1 have norm >= 1/√N


def test_unscaled_linear_attention_exceeds_softmax(fast_run):
    ds, _ = fast_run
    x1, sm = ds["attention_norm"].sel(activation="x/1"), ds["attention_norm"].sel(activation="softmax")
    assert (x1 > sm).all()  # every epoch, every layer
    assert float(x1.isel(epoch=-1).mean()) > 2 * float(sm.isel(epoch=-1).mean())


def test_interrupted_run_resumes_to_the_same_numbers(fast_run, tmp_path):
    ref, _ = fast_run
    out = tmp_path / "interrupted.nc"

    class Stop(Exception):
        pass

    def stop(label, epoch):
        if (label, epoch) == ("x³/1", 1):
            raise Stop

    with pytest.raises(Stop):
        run_experiment(["softmax", "x³/1"], out=out, preset="fast", callback=stop)
    partial = read_netcdf(out)
    assert partial["completed_epochs"].values.tolist() == [3, 1]
    assert np.isnan(partial["train_loss"].sel(activation="x³/1")[2:]).all()
    seen = []
    ds = run_experiment(["softmax", "x³/1"], out=out, preset="fast", callback=lambda a, e: seen.append((a, e)))
    assert seen == [("x³/1", 2), ("x³/1", 3)]  # softmax was done; x³/1 went on after epoch 1
    for var in EXACT:
        np.testing.assert_array_equal(ds[var].values, ref[var].sel(activation=["softmax", "x³/1"]).values)
    longer = run_experiment(["x³/1"], epochs=4, out=out, preset="fast")  # extends from the checkpoint
    assert longer["completed_epochs"].values.tolist() == [4]
    np.testing.assert_array_equal(longer["train_loss"].values[0, :4], ref["train_loss"].sel(activation="x³/1"))


def test_cli_trains_saves_plots_and_refuses_other_settings(tmp_path, capsys):
    out, png = tmp_path / "cli.nc", tmp_path / "cli.png"
    assert main(["--preset", "fast", "--epochs", "1", "--activations", "softmax,x^2/4",
                 "--out", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "x²/4" in text and "test accuracy" in text
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert read_netcdf(out)["activation"].values.tolist() == ["softmax", "x²/4"]
    with pytest.raises(LabConfigMismatchError) as err:
        run_experiment(["softmax"], epochs=1, out=out, preset="fast", seed=1)
    assert str(out) in str(err.value) and '"seed": 1' in err.value.requested
    assert main(["--preset", "fast", "--epochs", "1", "--out", str(out), "--seed", "1"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_committed_full_run():
    assert RESULT_PATH.exists(), "data/attention_lab.nc: run `python -m toolkit lab --out data/attention_lab.nc`"
    assert RESULT_PATH.stat().st_size < 2 * 2**20
    ds = read_netcdf(RESULT_PATH)
    assert ds["activation"].values.tolist() == ["softmax", "x/1", "x/16", "x³/1", "x³/16"]
    assert ds["epoch"].values.tolist() == list(range(201)) and ds.sizes["layer"] == 12
    assert ds["completed_epochs"].values.tolist() == [200] * 5 and ds.attrs["preset"] == "full"
    bound = math.sqrt(ds.attrs["num_tokens"])
    assert float(ds["attention_norm_max"].sel(activation="softmax").max()) <= bound + 1e-9
    final = ds["attention_norm"].isel(epoch=-1).mean("layer")
    assert float(final.sel(activation="x/1")) > 2 * float(final.sel(activation="softmax"))
    assert float(final.sel(activation="x³/16")) < float(final.sel(activation="softmax"))
    assert float(ds["test_accuracy"].sel(activation="softmax").isel(epoch=-1)) > 0.9


def test_committed_n65_run():
    from toolkit.lab import RESULTS, load_result
    from toolkit.lab.attention import SCORE_STATISTICS

    path = RESULTS["up16"]
    assert path.exists(), "data/attention_lab_n65.nc: run `python -m toolkit lab --preset up16 --out ...`"
    assert path.stat().st_size < 2 * 2**20
    ds = load_result("up16")
    assert ds["activation"].values.tolist() == list(PAPER_ACTIVATIONS)
    assert ds.attrs["preset"] == "up16" and ds.attrs["num_tokens"] == 65 and ds.attrs["image_size"] == 16
    done = ds["completed_epochs"].values
    assert (done == 200).all() and ds.sizes["epoch"] == 201  # the full 200 epochs, every activation
    bound = math.sqrt(65)
    assert float(ds["attention_norm_max"].sel(activation="softmax").max()) <= bound + 1e-9
    assert float(ds["attention_norm_max"].sel(activation="softmax").max()) > math.sqrt(17)  # above N = 17's ceiling
    for name in SCORE_STATISTICS:
        assert np.isfinite(ds[name]).all(), name
    x1 = ds.sel(activation="x/1")  # x/1 is A = S: mean |S| <= ‖S‖_F / N
    assert (x1["score_mean_abs"] <= x1["attention_norm"] / 65 * (1 + 1e-9)).all()


def test_committed_runs_say_what_notebook_04_says():
    """The figures notebook 04's "What the two runs say" quotes, read back from the two committed runs."""
    from toolkit.lab import load_result

    ds17, ds65 = load_result(), load_result("up16")
    last = {n: r["attention_norm"].sel(epoch=200) for n, r in (("17", ds17), ("65", ds65))}
    for norm in last.values():  # x³/1 above softmax in every layer, at both N
        assert (norm.sel(activation="x³/1") > norm.sel(activation="softmax")).all()
    mean = {n: v.mean("layer") for n, v in last.items()}
    assert 1.0 <= float(mean["17"].sel(activation="softmax")) <= 1.6
    assert 1.0 <= float(mean["65"].sel(activation="softmax")) <= 1.6
    assert float(mean["65"].sel(activation="x³/1")) > float(mean["65"].sel(activation="x/1"))
    ratio = (ds65["attention_norm"].sel(activation="x/1").mean("layer")
             / ds17["attention_norm"].sel(activation="x/1").mean("layer")).sel(epoch=slice(10, None))
    assert 3.2 <= float(ratio.min()) and float(ratio.max()) <= 4.1  # "3.3-4.0x at every epoch from 10 on"
    share = ds65["score_fraction_above_1"].sel(epoch=200).mean("layer")
    assert 0.03 <= float(share.sel(activation="x³/1")) <= 0.04 and 0.03 <= float(share.sel(activation="x³/16")) <= 0.04
    assert float(share.sel(activation="softmax")) == float(share.max())  # softmax learns the largest scores
    accuracy = ds65["test_accuracy"].sel(epoch=200)
    assert float(accuracy.sel(activation="x/16")) > float(accuracy.sel(activation="softmax"))
