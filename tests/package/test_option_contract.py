"""One contract for every front door: each public function declares every parameter on itself — an option by
what it takes (:mod:`toolkit.constraints`), anything else exempted with its reason
(:class:`toolkit.constraint_types.Exempt`) — and every declared option given a value it refuses raises one
``InvalidOptionError`` naming the function and the option, before any work.

"Before any work" is checked by giving each function a checkpoint that does not exist: a function that
opened it first would raise ``SourceNotFoundError`` instead.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import xarray as xr

import toolkit
import toolkit.finetune
import toolkit.lab
import toolkit.plot
import toolkit.widgets
from toolkit.constraint_types import is_exempt
from toolkit.constraints import declared_options
from toolkit.errors import InvalidOptionError

MISSING = "/nonexistent/checkpoint"

#: valid values for the parameters without a default (the work would fail on them, after the checks)
REQUIRED = {"base": MISSING, "source": MISSING, "checkpoints": [MISSING, MISSING], "layer": 0,
            "component": "attn.q", "ds": xr.Dataset(), "data": xr.Dataset(), "name": "contract_probe",
            "model": MISSING, "fmt": object(), "path": "contract_probe.nc", "out_dir": "contract_probe_run",
            "attention": torch.ones(1, 2, 2)}

#: the modules whose public functions the contract covers
MODULES = (toolkit, toolkit.plot, toolkit.widgets, toolkit.lab, toolkit.finetune)

#: the passes: only the checkpoint they measure may be exempted
FRONT_DOORS = {
    "toolkit.weight_stats": toolkit.weight_stats,
    "toolkit.cell_spectrum": toolkit.cell_spectrum,
    "toolkit.compare": toolkit.compare,
    "toolkit.compare_series": toolkit.compare_series,
    "toolkit.activation_stats": toolkit.activation_stats,
    "toolkit.open_source": toolkit.open_source,
    "toolkit.widgets.explore_model": toolkit.widgets.explore_model,
}


def _all_public():
    return {f"{m.__name__}.{n}": getattr(m, n) for m in MODULES for n in getattr(m, "__all__", ())
            if inspect.isfunction(getattr(m, n))}


PUBLIC = _all_public()
CASES = [(where, option) for where, fn in sorted(PUBLIC.items()) for option, c in declared_options(fn).items()
         if not is_exempt(c)]


def test_every_parameter_of_every_public_function_is_declared_on_the_function():
    """The declared names equal the signature's (scikit-learn's test_public_functions.py): an option is
    declared by its constraint, anything else exempted on the function with its reason, so a new parameter
    cannot slip past this test."""
    assert len(PUBLIC) >= 45
    for where, fn in PUBLIC.items():
        declared, params = set(declared_options(fn)), set(inspect.signature(fn).parameters)
        assert declared == params, f"{where}: undeclared {sorted(params - declared)}, unknown " \
                                   f"{sorted(declared - params)}"
        for name, constraint in declared_options(fn).items():
            if is_exempt(constraint):
                assert len(constraint.reason) > 20, f"{where}: {name} is exempted without a reason"


def test_the_passes_exempt_only_the_checkpoint_they_measure():
    for where, fn in FRONT_DOORS.items():
        exempt = {n for n, c in declared_options(fn).items() if is_exempt(c)}
        assert exempt <= {"source", "base", "target"}, f"{where}: {exempt}"


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
