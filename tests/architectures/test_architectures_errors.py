"""Error messages of the architectures room: they name the problem and the way out."""

from __future__ import annotations

import pytest
import torch

from toolkit.architectures import (
    FamilyAdapter,
    Mapping,
    register_architecture,
    registered_architectures,
    resolve_adapter,
)
from toolkit.architectures import adapter as adapter_module
from toolkit.errors import (
    DuplicateRegistrationError,
    MappingError,
    ToolkitError,
    UnmappedParametersError,
    UnsupportedArchitectureError,
)

PHI3 = {
    "model_type": "phi3", "num_hidden_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 64,
}
NAMES = ["tok.weight"] + [f"blocks.{i}.attn.wqkv.weight" for i in range(30)]


def test_unknown_model_type_lists_names_and_mapping_hint():
    with pytest.raises(UnsupportedArchitectureError) as info:
        resolve_adapter({"model_type": "mamba_xl"}, NAMES)
    err = info.value
    msg = str(err)
    assert isinstance(err, ToolkitError) and isinstance(err, KeyError)
    assert err.model_type == "mamba_xl" and "llama" in err.known and "gpt2" in err.known
    assert "'mamba_xl'" in msg and "Known families:" in msg and "phi3" in msg
    assert "blocks.0.attn.wqkv.weight" in msg and "tok.weight" in msg and "... and 11 more" in msg
    assert "mapping=toolkit.Mapping(" in msg and "register_architecture" in msg
    assert err.parameter_names == NAMES


def test_missing_model_type():
    with pytest.raises(UnsupportedArchitectureError, match="model_type None"):
        resolve_adapter({}, ["a.weight"])


def test_layer_count_mismatch_names_both():
    adapter = resolve_adapter(PHI3, [])
    adapter.check_layers([0, 1, 1, 2, 3])
    with pytest.raises(UnmappedParametersError) as info:
        adapter.check_layers([0, 1, 2])
    msg = str(info.value)
    assert "num_hidden_layers=4" in msg and "3 layers (0-2)" in msg and "missing layers: 3" in msg
    with pytest.raises(UnmappedParametersError, match=r"layers beyond the config: 4-5"):
        adapter.check_layers(range(6))
    with pytest.raises(UnmappedParametersError, match=r"found in 0 layers \(none\)"):
        adapter.check_layers([])


def test_duplicate_registration_raises_unless_overwrite():
    before = registered_architectures()
    with pytest.raises(DuplicateRegistrationError) as info:

        @register_architecture("llama")
        class Other(FamilyAdapter):
            modules = {"attn.wq": "attn.q"}

    assert (info.value.kind, info.value.name) == ("architecture", "llama")
    assert info.value.existing is before["llama"] and "LlamaAdapter" in str(info.value)
    assert "overwrite=True" in str(info.value)
    assert registered_architectures() == before  # nothing half-registered

    try:

        @register_architecture("toolkit_test_family")
        class Mine(FamilyAdapter):
            modules = {"attn.wq": "attn.q"}

        with pytest.raises(DuplicateRegistrationError):
            register_architecture("toolkit_test_family")(type("Again", (FamilyAdapter,), {}))
        register_architecture("toolkit_test_family", overwrite=True)(type("Again", (FamilyAdapter,), {}))
        assert registered_architectures()["toolkit_test_family"].__name__ == "Again"
    finally:
        adapter_module._REGISTRY.pop("toolkit_test_family", None)


def test_fused_rows_disagree_with_config():
    adapter = resolve_adapter(PHI3, [])
    (q, *_) = adapter.pieces("model.layers.0.self_attn.qkv_proj.weight")
    q.extract(torch.zeros(64, 32))
    with pytest.raises(MappingError) as info:
        q.extract(torch.zeros(96, 32))
    assert "declares 64 fused output rows" in str(info.value) and "(96, 32)" in str(info.value)
    with pytest.raises(MappingError, match="2-D matrix"):
        q.extract(torch.zeros(64))


def test_split_needs_a_size_the_config_lacks():
    with pytest.raises(MappingError, match="config lacks a size"):
        resolve_adapter({"model_type": "phi3", "num_hidden_layers": 2}, [])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"patterns": {"attn.query": r"l\.(\d+)\.q"}}, "unknown component 'attn.query'"),
        ({"patterns": {"attn.q": r"l\.\d+\.q"}}, "needs a capture group"),
        ({"patterns": {"attn.q": r"l\.(\d+\.q"}}, "bad regular expression"),
        ({"patterns": {"attn.q": r"l\.(\d+)\.q"}, "transpose": ["attn.k"]}, "transpose names neither"),
        ({"patterns": {}, "fused": {r"l\.(\d+)\.qkv": ("attn.q", "attn.k")}}, "needs a Split"),
    ],
)
def test_bad_mapping(kwargs, match):
    patterns = kwargs.pop("patterns")
    with pytest.raises(MappingError, match=match):
        Mapping(patterns, **kwargs)


def test_name_matching_two_patterns():
    m = Mapping({"attn.q": r"l\.(\d+)\.w", "attn.k": r"l\.(\d+)\.\w"})
    with pytest.raises(MappingError, match="matches several patterns"):
        m.adapter({}).pieces("l.0.w")


def test_one_type_for_every_duplicate_registration():
    """Architectures and metrics raise the same class, kept under every old name, and it pickles."""
    import pickle

    from toolkit.metrics import DuplicateMetricError, register_metric
    from toolkit.metrics import registry as metric_registry

    assert DuplicateMetricError is DuplicateRegistrationError
    assert metric_registry.DuplicateMetricError is DuplicateMetricError
    assert issubclass(DuplicateRegistrationError, ToolkitError) and issubclass(DuplicateRegistrationError, ValueError)
    caught = []
    for register in (lambda: register_architecture("llama")(type("Other", (FamilyAdapter,), {})),
                     lambda: register_metric("stable_rank", lambda w, s: 0.0, long_name="mine")):
        with pytest.raises(DuplicateRegistrationError) as info:
            register()
        caught.append(info.value)
    assert [type(e) for e in caught] == [DuplicateRegistrationError] * 2
    assert [e.kind for e in caught] == ["architecture", "metric"]
    again = pickle.loads(pickle.dumps(caught[0]))
    assert (type(again), again.args, again.kind, again.name) == (DuplicateRegistrationError, caught[0].args,
                                                                 "architecture", "llama")
