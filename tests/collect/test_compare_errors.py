"""Error messages of compare / compare_series: each names the mismatch and the way out."""

from __future__ import annotations

import pytest

from _compare_data import tiny, variant
from toolkit.collect.compare import compare, compare_series
from toolkit.errors import CheckpointMismatchError, InvalidOptionError, ToolkitError, UnknownMetricError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tiny(tmp_path_factory.mktemp("cmp_err") / "base")


def test_more_layers_names_the_first_missing_tensor(base, tmp_path):
    deeper = tiny(tmp_path / "deeper", num_layers=4)
    with pytest.raises(CheckpointMismatchError) as err:
        compare(base, deeper, progress=False)
    e = err.value
    assert e.name.startswith("model.layers.3.") and e.base == "absent"
    assert "the base has no such tensor" in str(e)
    assert "3 layers" in str(e) and "4 layers" in str(e)
    with pytest.raises(CheckpointMismatchError, match=r"model\.layers\.3\..*the target has no such tensor"):
        compare(deeper, base, progress=False)


def test_other_shape_names_the_tensor_and_both_shapes(base, tmp_path):
    """A target whose v_proj lost a row contradicts its own config: refused while it is planned, naming the
    tensor, the shape its config gives and the stored one."""
    from toolkit.errors import MappingError

    bad = variant(base, tmp_path / "bad", lambda k, v: v[:-1] if k == "model.layers.0.self_attn.v_proj.weight" else v)
    with pytest.raises(MappingError) as err:
        compare(base, bad, progress=False)
    assert err.value.key == "model.layers.0.self_attn.v_proj.weight"
    assert "(16, 32)" in str(err.value) and "(15, 32)" in str(err.value) and str(bad) in str(err.value)


def test_other_architecture_is_refused(base, tmp_path):
    gpt2 = tiny(tmp_path / "gpt2", family="gpt2")
    with pytest.raises(CheckpointMismatchError, match="base is llama, 3 layers.*target is gpt2"):
        compare(base, gpt2, progress=False)


def test_series_checks_every_checkpoint_before_any_work(base, tmp_path, monkeypatch):
    from toolkit.sources.base import TensorRecord

    monkeypatch.setattr(TensorRecord, "read", lambda self: pytest.fail("read before the mismatch was found"))
    deeper = tiny(tmp_path / "deeper", num_layers=4)
    with pytest.raises(CheckpointMismatchError, match="model.layers.3"):
        compare_series([base, base, deeper], progress=False, cache=False)


def test_metric_names(base):
    with pytest.raises(UnknownMetricError, match="relative_change"):
        compare(base, base, ["relative_chnage"], progress=False)
    with pytest.raises(UnknownMetricError):  # a weight metric is not a diff metric
        compare(base, base, ["stable_rank"], progress=False)


def test_series_arguments(base):
    with pytest.raises(InvalidOptionError, match="checkpoints must be a non-empty list"):
        compare_series([], progress=False)
    with pytest.raises(InvalidOptionError, match="2 steps for 1 checkpoints"):
        compare_series([base], steps=[0, 1], progress=False)
    with pytest.raises(ToolkitError, match="reference must be one of"):
        compare_series([base], reference="last", progress=False)


def test_missing_source(base, tmp_path):
    with pytest.raises(ToolkitError, match="cannot open checkpoint"):
        compare(base, tmp_path / "nowhere", progress=False)
