"""Every error class of the toolkit lives in ``toolkit.errors``; the old import paths still work."""

from __future__ import annotations

import importlib
import pickle
import pkgutil

import pytest

import toolkit
from toolkit import errors

#: (module, name) pairs users and older code import error classes from.
OLD_PATHS = [
    ("toolkit.metrics", "DegenerateMatrix"),
    ("toolkit.metrics.registry", "DegenerateMatrix"),
    ("toolkit.metrics", "DuplicateMetricError"),
    ("toolkit.metrics.registry", "DuplicateMetricError"),
    ("toolkit.lab", "UnknownActivationError"),
    ("toolkit.lab.attention", "UnknownActivationError"),
    ("toolkit.lab", "LabConfigMismatchError"),
    ("toolkit.lab.train", "LabConfigMismatchError"),
]


@pytest.mark.parametrize("module, name", OLD_PATHS)
def test_old_import_paths_give_the_class_of_errors_py(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert cls is getattr(errors, name) and cls.__module__ == "toolkit.errors"


def _modules():
    for info in pkgutil.walk_packages(toolkit.__path__, "toolkit."):
        if info.name == "toolkit.errors" or info.name.endswith("__main__"):  # a __main__ module runs on import
            continue
        yield importlib.import_module(info.name)


def test_no_error_class_is_defined_outside_errors_py():
    foreign = sorted(
        f"{module.__name__}.{name}"
        for module in _modules()
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__
    )
    assert foreign == []


def test_errors_rebuild_from_their_fields_after_pickling():
    cases = [
        errors.DegenerateMatrix("all-zero matrix", "stable_rank"),
        errors.WorkerTaskError("ckpt", "w.weight", "tcp://1.2.3.4:5", "ValueError: boom."),
        errors.DuplicateRegistrationError("architecture", "llama", "LlamaAdapter"),
    ]
    for exc in cases:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and again.args == exc.args and vars(again) == vars(exc)
    worker = cases[1]
    assert isinstance(worker, errors.ToolkitError) and isinstance(worker, RuntimeError)
    assert (worker.checkpoint, worker.tensor, worker.worker, worker.reason) == (
        "ckpt", "w.weight", "tcp://1.2.3.4:5", "ValueError: boom.")
    assert str(worker).startswith("checkpoint 'ckpt' (tensor 'w.weight') failed on Dask worker tcp://1.2.3.4:5: "
                                  "ValueError: boom. Every worker")
    assert str(cases[0]) == "stable_rank: all-zero matrix" and cases[0].reason == "all-zero matrix"


def test_lab_errors_keep_their_fields_and_bases():
    unknown = errors.UnknownActivationError("x^0/2")
    assert unknown.text == "x^0/2" and isinstance(unknown, ValueError) and "'x^0/2'" in str(unknown)
    mismatch = errors.LabConfigMismatchError("/tmp/lab.nc", '{"dim": 32}', '{"dim": 16}')
    assert (mismatch.path, mismatch.saved, mismatch.requested) == ("/tmp/lab.nc", '{"dim": 32}', '{"dim": 16}')
    assert isinstance(mismatch, errors.ToolkitError) and "resume=False" in str(mismatch)


def test_hostile_round_2_errors_keep_their_fields_after_pickling():
    """The errors of quantised layouts, missing weights and unchosen dimensions travel back from a Dask worker."""
    cases = [
        errors.QuantizedLayoutError("/m/model.safetensors", "q.weight", "gptq int4", "scales has shape (32,)"),
        errors.MissingWeightsError("/m", ["model.layers.0.self_attn.q_proj.weight"], ["extra.weight"]),
        errors.ExtraDimensionError("stable_rank_per_expert", "expert", [0, 1], "choose one: expert=0"),
    ]
    for exc in cases:
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and again.args == exc.args and vars(again) == vars(exc)
        assert str(again) == str(exc) and isinstance(again, errors.ToolkitError)
    layout, missing, extra = cases
    assert isinstance(layout, errors.UnsupportedQuantizationError) and layout.path == "/m/model.safetensors"
    assert str(layout) == ("bad checkpoint file '/m/model.safetensors': tensor 'q.weight' (gptq int4): scales has "
                           "shape (32,)")
    assert missing.missing == ["model.layers.0.self_attn.q_proj.weight"] and missing.unexpected == ["extra.weight"]
    assert isinstance(extra, ValueError) and "expert=0" in str(extra)
    assert issubclass(errors.MissingTensorWarning, UserWarning)
