"""The lesson's answer notes: every number read from the run, checked against xarray done by hand."""

import math

import numpy as np
import pytest

from toolkit.lab import load_result
from toolkit.lab.lesson import answer_notes, first_crossing, peak, ranking


@pytest.fixture(scope="module")
def ds():
    return load_result()


def test_ranking_and_peak_are_the_datasets_numbers(ds):
    at = ds["attention_norm"].isel(epoch=-1).sel(layer=11)
    order = ranking(ds, layer=11)
    assert [a for a, _ in order] == [str(a) for a in at.sortby(-at)["activation"].values]
    assert order[0][1] == pytest.approx(float(at.max())) and order[-1][1] == pytest.approx(float(at.min()))
    value, epoch, layer = peak(ds, "softmax")
    heads = ds["attention_norm_max"].sel(activation="softmax").max("head")
    assert value == pytest.approx(float(heads.max())) == pytest.approx(float(heads.sel(epoch=epoch, layer=layer)))
    assert value < math.sqrt(17)  # the theorem, in the committed run


def test_first_crossing_is_the_first_epoch_any_layer_goes_above(ds):
    heads = ds["attention_norm_max"].sel(activation="x³/16").max("head")
    above = (heads > math.sqrt(17)).any("layer").values
    epoch, layers = first_crossing(ds, "x³/16")
    assert epoch == int(np.argmax(above)) and not above[:epoch].any()
    assert layers == [int(x) for x in ds["layer"].values if heads.sel(epoch=epoch, layer=x) > math.sqrt(17)]
    assert first_crossing(ds, "softmax") is None
    assert first_crossing(ds, "x/1")[0] == 0  # above at initialisation
    assert first_crossing(ds, "softmax", level=1.0)[0] >= 0  # any level can be asked


def test_answer_notes_carry_the_computed_numbers(ds):
    notes = answer_notes(ds)
    assert sorted(notes) == ["q1", "q2", "q3", "q4"]
    soft = float(ds["attention_norm_max"].sel(activation="softmax").max())
    assert f"reaches {soft:.2f}" in notes["q3"] and "never above it" in notes["q3"] and "√N = 4.12" in notes["q3"]
    epoch, layers = first_crossing(ds, "x³/16")
    assert f"x³/16 first above at epoch {epoch}" in notes["q3"]
    acc = ds["test_accuracy"].isel(epoch=-1)
    for a in ds["activation"].values:
        assert f"{a} {100 * float(acc.sel(activation=a)):.1f} %" in notes["q4"]
    mean = float(ds["attention_norm"].sel(activation="softmax").max())
    assert notes["q2"].startswith("No.") and f"at most {mean:.2f}" in notes["q2"]
    assert notes["q1"].startswith("At epoch 200, layer 11: ")
