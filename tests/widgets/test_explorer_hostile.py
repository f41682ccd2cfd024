"""The explorer on hostile input: typed colour limits that are not finite numbers, a pair of models where one
lacks a component, set_data with a Dataset that cannot replace the one shown."""

import numpy as np
import pytest
import xarray as xr

from toolkit.errors import EmptyInputError
from toolkit.widgets import explore

V = np.array([[1.5, 2.0, 3.25], [4.0, 0.5, 6.0], [7.5, 8.0, 2.5]])
COMPONENTS = ["attn.q", "attn.k", "mlp.up"]


def _ds(values=V, components=COMPONENTS, name="stable_rank", model=None):
    values = np.asarray(values, dtype=float)
    ds = xr.Dataset({name: (("layer", "component"), values, {"long_name": "Stable rank"})},
                    coords={"layer": np.arange(values.shape[0]), "component": components[: values.shape[1]]})
    if model:
        ds.attrs["model"] = model
    return ds


@pytest.mark.parametrize("lo, hi, bad", [("nan", "", "min 'nan'"), ("", "inf", "max 'inf'"),
                                         ("1e999", "", "min '1e999'"), ("-inf", "5", "min '-inf'"),
                                         ("nan", "nan", "min 'nan'")])
def test_a_typed_limit_that_is_not_finite_keeps_the_figure_and_is_noted(lo, hi, bad):
    e = explore(_ds())
    with e.hold():
        e.controls["vmin"].value, e.controls["vmax"].value = lo, hi
    # the figure stays (was "Nothing to draw ... vmin=nan is not valid"), its limits from the rest
    assert e.message == "" and e.current is not None
    expected_hi = float(hi) if hi and np.isfinite(float(hi)) else None
    finite = V[np.isfinite(V)]
    assert e.current.vmax == (expected_hi if expected_hi is not None else pytest.approx(np.percentile(finite, 98)))
    assert e.current.vmin == pytest.approx(np.percentile(finite, 2))
    note = e.limits_note.value.replace("&#x27;", "'")
    assert f"{bad} is not a finite number" in note and "automatic limits used" in note


def test_side_by_side_shows_a_model_that_lacks_a_component_with_its_own_columns():
    a, b = _ds(model="a"), _ds(V[:, :2] * 2, model="b")  # b has no mlp.up
    e = explore([a, b])
    assert e.controls["view"].value == "side"
    assert e.message == ""  # was "unknown component(s) ['mlp.up']"
    first, second = e.prepared
    np.testing.assert_array_equal(first.values, V)
    assert second.cols == ("attn.q", "attn.k")
    np.testing.assert_array_equal(second.values, V[:, :2] * 2)
    assert e.hover_text(2, "attn.k", panel=1).splitlines()[1] == f"Stable rank: {V[2, 1] * 2:g}"
    e.controls["components"]["attn.q"].value = False  # a toggle still applies to both panels
    assert e.prepared[0].cols == ("attn.k", "mlp.up") and e.prepared[1].cols == ("attn.k",)
    np.testing.assert_array_equal(e.prepared[1].values, V[:, 1:2] * 2)


@pytest.mark.parametrize("new, what", [(_ds(name="other"), "lacks 'stable_rank'"), (None, "got NoneType"),
                                       ([_ds()], "got list")])
def test_set_data_refuses_what_cannot_replace_the_dataset_and_keeps_the_figure(new, what):
    e = explore(_ds())
    with pytest.raises(EmptyInputError, match=what):  # was a KeyError / AttributeError from inside
        e.set_data(new)
    assert e.message == "" and e.models[0][1]["stable_rank"].values.tolist() == V.tolist()
    np.testing.assert_array_equal(e.current.values, V)
    e.set_data(_ds(V + 1))  # a fitting one is still taken
    np.testing.assert_array_equal(e.current.values, V + 1)


def test_the_save_functions_write_into_new_folders_and_name_the_path_they_cannot_write(tmp_path):
    from toolkit.errors import OutputPathError
    from toolkit.widgets import export_html

    e = explore(_ds())
    got = e.save_csv(tmp_path / "new" / "deeper" / "n.csv")  # was FileNotFoundError
    rows = [line.split(",") for line in got.read_text().splitlines()[1:]]
    np.testing.assert_array_equal(np.array([float(r[3]) for r in rows]).reshape(3, 3), V)
    with pytest.warns(UserWarning, match="no drill-down spectra"):  # _ds() stores no spectra
        page = export_html(_ds(), tmp_path / "other" / "p.html")  # was FileNotFoundError naming '.p.html.<hex>.tmp'
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    blocker = tmp_path / "file"
    blocker.write_text("")
    calls = [lambda: e.save_csv(tmp_path), lambda: e.save_figure(blocker / "f.png"),
             lambda: export_html(_ds(), tmp_path), lambda: e.save_csv(tmp_path / ("x" * 300 + ".csv"))]
    for call in calls:
        with pytest.raises(OutputPathError) as err:
            call()
        assert ".tmp" not in str(err.value) and str(tmp_path) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "new", "other"]  # no temporary left
    e.out_dir = tmp_path / "named"
    e.controls["filename"].value = "y" * 300  # a default name from a long file name box is cut to fit
    first, second = e.save_csv(), e.save_csv()  # was OSError: File name too long
    assert len(first.name.encode()) <= 255 and first.name.startswith("y" * 190) and first.suffix == ".csv"
    assert second.name == first.name.replace(".csv", "-2.csv") and len(second.name.encode()) <= 255
    e.controls["filename"].value = "é" * 200  # cut between characters, not inside one
    assert e.save_csv().name.startswith("é" * 100)


def test_labels_are_one_per_dataset_a_str_is_one_label_and_repeats_never_collide(tmp_path):
    from toolkit.errors import InvalidOptionError
    from toolkit.widgets import export_html

    a, b = _ds(model="a"), _ds(2 * V, model="b")
    assert [p.label for p in explore(a, labels="my model").panels] == ["my model"]  # was 8 labels, one a letter
    for labels in (["x"], ["x", "y", "z"]):  # was ValueError: zip() argument 2 is longer than argument 1
        with pytest.raises(InvalidOptionError, match="one label per Dataset"):
            explore([a, b], labels=labels)
        with pytest.raises(InvalidOptionError, match="one label per Dataset"):
            export_html([a, b], tmp_path / "p.html", labels=labels)
    e = explore([a, b, a], labels=["x", "x (2)", "x"])
    assert [p.label for p in e.panels] == ["x", "x (2)", "x (3)"]  # the third was a second "x (2)"
    np.testing.assert_array_equal(e.prepared[1].values, 2 * V)


def test_save_figure_takes_a_format_in_any_case_and_a_path_without_suffix(tmp_path):
    e = explore(_ds())
    magic = {"png": b"\x89PNG\r\n\x1a\n", "svg": b"<svg", "pdf": b"%PDF"}
    e.controls["format"].value = "svg"
    no_suffix = e.save_figure(tmp_path / "figure")  # was ValueError: ... got ''
    assert no_suffix.name == "figure" and magic["svg"] in no_suffix.read_bytes()[:400]
    assert e.save_figure(tmp_path / "a.png", fmt="PDF").read_bytes().startswith(magic["pdf"])  # was ... got 'PDF'
    assert e.save_figure(tmp_path / "b.PNG").read_bytes().startswith(magic["png"])


def test_the_live_view_builds_a_new_explorer_for_a_dataset_lacking_a_variable_it_showed():
    from toolkit.widgets._model import _same_grid

    both = _ds().assign(other=_ds()["stable_rank"] * 2)
    assert _same_grid(_ds(), both)  # a new variable: the explorer is kept, set_data takes it
    assert not _same_grid(both, _ds())  # one gone: set_data would refuse it, a new explorer is built
    explore(both).set_data(both)
