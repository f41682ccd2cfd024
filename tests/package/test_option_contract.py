"""One contract for every front door: each public function declares what its options take
(:mod:`toolkit.constraints`), and every declared option given a value it refuses raises one
``InvalidOptionError`` naming the function and the option, before any work.

"Before any work" is checked by giving each function a checkpoint that does not exist: a function that
opened it first would raise ``SourceNotFoundError`` instead.
"""

from __future__ import annotations

import inspect

import pytest
import xarray as xr

import toolkit
import toolkit.plot
import toolkit.widgets
from toolkit.constraints import declared_options
from toolkit.errors import InvalidOptionError

MISSING = "/nonexistent/checkpoint"

#: values for the parameters without a default (valid, but the work would fail on them)
REQUIRED = {"base": MISSING, "source": MISSING, "checkpoints": [MISSING, MISSING], "layer": 0,
            "component": "attn.q", "ds": xr.Dataset(), "data": xr.Dataset(), "name": "contract_probe",
            "model": MISSING, "fmt": object()}

#: public parameters that are no option, by reason: what the function works on (each refused by its own typed
#: error), definitions handed to a registry, and objects or keywords passed on to matplotlib or another front door
NOT_OPTIONS = {
    "source": "the checkpoint: SourceTypeError / SourceNotFoundError (toolkit.sources.SourceRequest)",
    "base": "a checkpoint, as source", "target": "a checkpoint, as source", "model": "a checkpoint or loaded model",
    "texts": "the input texts: TextInputError / EmptyInputError (toolkit.activations.inputs)",
    "data": "the Dataset(s) drawn or explored", "ds": "the Dataset", "prepared": "prepared figure data",
    "p": "prepared figure data", "path": "the file: OutputPathError / ResultsNotFoundError (toolkit.io)",
    "name": "what is looked up or registered", "func": "a definition", "long_name": "a definition",
    "units": "a definition", "description": "a definition", "reference": "a definition", "options": "a definition",
    "fmt": "a definition", "model_types": "a definition",
    "ax": "a matplotlib Axes", "fig": "a matplotlib Figure", "cbar_kws": "passed to matplotlib's colorbar",
    "kwargs": "passed on to the function named in the docstring, which declares them",
    "compute": "measuring options of a checkpoint: explore_model's, which declares them",
    "selection": "labels of the Dataset's other dims (UnknownMetricError / ValueError naming the known labels)",
    "center": "a value of the metric, or None", "title": "any text", "titles": "any texts",
    "layers": "plot: layer labels of the Dataset (ValueError naming the known ones)",
    "components": "plot: component labels of the Dataset (ValueError naming the known ones)",
    "activations": "labels of the lab result (EmptyInputError naming the known ones)",
    "head": "a head label of the Dataset (EmptyInputError naming the known ones)",
    "marker": "a matplotlib marker", "figsize": "passed to matplotlib", "legend": "as the docstring says",
    "annotate": "draw: as prepared", "cbar": "draw: as prepared", "bins": "draw: as prepared",
    "metrics": "the variables to draw (UnknownMetricError naming the known ones)", "metric": "as metrics",
}
#: the passes' own parameters of those names are options, and must be declared
PASS_OPTIONS = {"metrics", "metric", "layers", "components"}

#: the front doors whose every option must be declared
FRONT_DOORS = {
    "toolkit.weight_stats": toolkit.weight_stats,
    "toolkit.cell_spectrum": toolkit.cell_spectrum,
    "toolkit.compare": toolkit.compare,
    "toolkit.compare_series": toolkit.compare_series,
    "toolkit.activation_stats": toolkit.activation_stats,
    "toolkit.open_source": toolkit.open_source,
    "toolkit.widgets.explore_model": toolkit.widgets.explore_model,
}


def _public_functions():
    found = {}
    for module in (toolkit, toolkit.plot, toolkit.widgets):
        for name in getattr(module, "__all__", ()):
            fn = getattr(module, name)
            if inspect.isfunction(fn) and declared_options(fn):
                found[f"{module.__name__}.{name}"] = fn
    return found


PUBLIC = _public_functions()
CASES = [(where, option) for where, fn in sorted(PUBLIC.items()) for option in declared_options(fn)]


def _all_public():
    return {f"{m.__name__}.{n}": getattr(m, n) for m in (toolkit, toolkit.plot, toolkit.widgets)
            for n in getattr(m, "__all__", ()) if inspect.isfunction(getattr(m, n))}


def test_every_public_parameter_is_declared_or_named_with_its_reason():
    """Every option of every pass is declared; no public function has an undeclared parameter that is not on
    the NOT_OPTIONS list with its reason."""
    assert set(FRONT_DOORS) <= set(PUBLIC), set(FRONT_DOORS) - set(PUBLIC)
    for where, fn in FRONT_DOORS.items():
        declared = declared_options(fn)
        for name in inspect.signature(fn).parameters:
            if name in NOT_OPTIONS and name not in PASS_OPTIONS:
                continue
            assert name in declared, f"{where}: option {name!r} has no declared constraint"
    for where, fn in _all_public().items():
        declared = declared_options(fn)
        undeclared = [n for n in inspect.signature(fn).parameters if n not in declared and n not in NOT_OPTIONS]
        assert not undeclared, f"{where}: parameters {undeclared} are neither declared nor named in NOT_OPTIONS"


def _call(fn, option: str, value):
    args, kwargs = [], {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == option:
            if p.kind is p.VAR_KEYWORD:
                kwargs.update(value)
            elif p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty:
                args.append(value)
            else:
                kwargs[name] = value
        elif (p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)) or name == "source":
            given = REQUIRED.get(name, "x")  # any other required parameter: a placeholder, never reached
            if p.kind is p.POSITIONAL_OR_KEYWORD:
                args.append(given)
            else:
                kwargs[name] = given
    return fn(*args, **kwargs)


@pytest.mark.parametrize("where, option", CASES, ids=[f"{w}-{o}" for w, o in CASES])
def test_a_bad_value_of_every_declared_option_is_one_typed_error_before_any_work(where, option, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fn = PUBLIC[where]
    constraint = declared_options(fn)[option]
    bad = constraint.invalid()
    with pytest.raises(InvalidOptionError) as info:
        _call(fn, option, bad)
    err = info.value
    named = next(iter(bad)) if isinstance(bad, dict) and inspect.signature(fn).parameters[option].kind is \
        inspect.Parameter.VAR_KEYWORD else option
    assert err.option == named, str(err)
    assert err.where == where
    assert str(err).startswith(f"{err.where}: {named}=")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json*"))


@pytest.mark.parametrize("value", ["no", 0, 1, None, "False"])
def test_a_flag_is_a_bool_on_every_front_door(value):
    """``keep_spectra="no"`` ran and kept the eigenvalues in weight_stats (``bool("no")``) while compare refused
    it: one rule now."""
    for fn in (toolkit.weight_stats, toolkit.compare):
        with pytest.raises(InvalidOptionError, match="keep_spectra=.* must be True or False"):
            fn(MISSING, keep_spectra=value) if fn is toolkit.weight_stats else fn(MISSING, MISSING,
                                                                                   keep_spectra=value)


def test_download_device_and_thresholds_name_themselves():
    with pytest.raises(InvalidOptionError, match=r"toolkit.weight_stats: download='yes' is not valid"):
        toolkit.weight_stats(MISSING, download="yes")
    with pytest.raises(InvalidOptionError, match=r"toolkit.weight_stats: device=42 is not valid"):
        toolkit.weight_stats(MISSING, device=42)
    with pytest.raises(InvalidOptionError, match=r"toolkit.compare: device='tpu' is not valid"):
        toolkit.compare(MISSING, MISSING, device="tpu")
    with pytest.raises(InvalidOptionError, match=r"quality_thresholds=\(6, 2\) is not valid"):
        toolkit.weight_stats(MISSING, quality_thresholds=(6, 2))


def test_checked_values_are_the_ones_used():
    """A NumPy integer is taken as the int it is; the function sees the checked value."""
    import numpy as np

    from toolkit.constraints import Whole, checks_options

    @checks_options(k=Whole(minimum=1))
    def f(*, k=1):
        return k

    assert f(k=np.int64(3)) == 3 and type(f(k=np.int64(3))) is int
    with pytest.raises(InvalidOptionError, match=r"f: k=0 is not valid: k must be a whole number >= 1"):
        f(k=0)
    with pytest.raises(TypeError, match="no parameter"):
        checks_options(nope=Whole())(lambda k=1: k)


def test_explore_model_checks_what_it_forwards_to_weight_stats():
    with pytest.raises(InvalidOptionError, match=r"keep_spectra='no' is not valid"):
        toolkit.widgets.explore_model(MISSING, display=False, background=False, keep_spectra="no")
    with pytest.raises(InvalidOptionError, match=r"bogus=1 is not valid: bogus must be left out: it is no option "
                       r"of weight_stats"):
        toolkit.widgets.explore_model(MISSING, display=False, background=False, bogus=1)


def test_a_source_request_addresses_both_sides_of_compare(tmp_path):
    """compare and compare_series take gguf_file / revision as weight_stats does, or a SourceRequest per side."""
    from toolkit.sources import SourceRequest

    sig = inspect.signature(toolkit.compare).parameters
    assert {"gguf_file", "revision", "download"} <= set(sig)
    assert {"gguf_file", "revision", "download"} <= set(inspect.signature(toolkit.compare_series).parameters)
    r = SourceRequest.of("org/name", revision="v1")
    assert SourceRequest.of(r) is r and SourceRequest.of(r, revision="v1") is r
    assert SourceRequest.of(r, gguf_file="a.gguf").gguf_file == "a.gguf"
    with pytest.raises(InvalidOptionError, match="revision='v2' is not valid: revision must be left out: the "
                       "SourceRequest already says revision='v1'"):
        SourceRequest.of(r, revision="v2")
    with pytest.raises(InvalidOptionError, match="download"):
        SourceRequest("org/name", download="yes")
