"""What the Source contract declares (toolkit.sources.base), with its defaults and each format's values."""

from __future__ import annotations

import os

import pytest
import torch

import toolkit
from _quant_writers import tiny_original, write_fp8
from toolkit.errors import AdapterBaseError, NotAnUpdateError, ToolkitError
from toolkit.sources import Source, TensorRecord, open_source
from toolkit.sources.lora import AdapterSource, MergedRecord, MergedSource
from toolkit.testing import write_tiny_adapter


@pytest.fixture(scope="module")
def adapter_pair(tmp_path_factory):
    return write_tiny_adapter(tmp_path_factory.mktemp("lora"), "llama", target_modules=["q_proj", "down_proj"])


def test_defaults_of_a_full_checkpoint(tiny_qwen2):
    src = open_source(tiny_qwen2[1]["single"])
    assert (src.missing_config, src.checks_identity_on_read, tuple(src.dropped)) == ("", False, ())
    assert (src.covers_every_layer, src.measured_as_factors) == (True, False)
    assert src.check_standalone() is None
    assert src.extra_attrs() == {} and src.decoder_versions() == "" and src.reopen_kwargs() == {}
    with pytest.raises(NotAnUpdateError, match=r"\(safetensors\) is not an update of a base model: only an update "
                                               r"\(a LoRA adapter folder\) can be merged") as err:
        src.merged_into(open_source(tiny_qwen2[1]["bin"]))
    assert isinstance(err.value, ToolkitError) and isinstance(err.value, TypeError)
    assert err.value.format == "safetensors" and err.value.source == src.location


def test_a_bare_source_subclass_gets_every_default():
    class Bare(Source):
        location, format, fingerprint = "/nowhere", "bare", "0"
        config = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [16, 24]}}

    src = Bare()
    assert src.extra_attrs() == {"quantization": "fp8 e4m3, 16x24 blocks"}  # known only from its config
    assert src.decoder_versions() == "" and src.reopen_kwargs() == {} and tuple(src.dropped) == ()
    assert src.covers_every_layer and not src.measured_as_factors and not src.checks_identity_on_read


def test_records_declare_base_record_and_can_read_rows(tiny_qwen2, tiny_gguf_dir):
    st = next(open_source(tiny_qwen2[1]["single"]).tensors())
    assert st.base_record is None and st.can_read_rows  # safetensors reads row blocks
    gguf = next(open_source(tiny_gguf_dir, gguf_file="f16.gguf").tensors())
    assert gguf.base_record is None and not gguf.can_read_rows
    bare = TensorRecord("w", (2, 2), "float32", lambda: torch.zeros(2, 2))
    assert bare.base_record is None and not bare.can_read_rows


def test_a_quantised_checkpoint_says_so_in_its_attrs(tmp_path):
    original = tiny_original(tmp_path / "orig")[0]
    path, _ = write_fp8(tmp_path / "fp8", original)
    src = open_source(path)
    assert src.extra_attrs() == {"quantization": "fp8 e4m3, 16x24 blocks"}
    assert src.decoder_versions() == "" and src.reopen_kwargs() == {}
    quantised = next(r for r in src.tensors() if r.name.endswith("q_proj.weight"))
    assert quantised.dtype.startswith("float8_e4m3fn") and not quantised.can_read_rows  # a 2-D parameter: read whole


def test_a_gguf_source_declares_its_dropped_tensors_decoders_and_file(tiny_gguf_dir, write_tiny_llama_gguf, tmp_path):
    from importlib.metadata import version

    write_tiny_llama_gguf(tmp_path / "rope.gguf", "F16", extra=True)
    src = open_source(tmp_path / "rope.gguf")
    assert list(src.dropped) == ["rope_freqs.weight"]
    assert src.decoder_versions() == f"gguf={version('gguf')},transformers={version('transformers')}"
    assert src.reopen_kwargs() == {"gguf_file": "rope.gguf"}
    again = open_source(src.location, **src.reopen_kwargs())
    assert again.fingerprint == src.fingerprint and [r.name for r in again.tensors()] == [r.name for r in src.tensors()]
    assert not list(open_source(tiny_gguf_dir, gguf_file="f16.gguf").dropped)


def test_a_hub_source_reopens_at_its_commit(tiny_qwen2, hf_cache, make_hf_cache, tiny_gguf_dir):
    commit = "0123456789abcdef0123456789abcdef01234567"
    make_hf_cache(hf_cache, "org/tiny-qwen2", {p.name: p for p in tiny_qwen2[1]["single"].iterdir()}, commit)
    src = open_source("org/tiny-qwen2")
    assert not os.path.isabs(src.location) and src.reopen_kwargs() == {"revision": commit}
    assert open_source(src.location, **src.reopen_kwargs()).fingerprint == src.fingerprint
    make_hf_cache(hf_cache, "org/tiny-gguf", {p.name: p for p in tiny_gguf_dir.iterdir()}, commit)
    gguf = open_source("org/tiny-gguf", gguf_file="q8_0.gguf")
    assert gguf.reopen_kwargs() == {"revision": commit, "gguf_file": "q8_0.gguf"}
    assert open_source(gguf.location, **gguf.reopen_kwargs()).files() == gguf.files()


def test_an_adapter_is_measured_as_factors_and_merges_into_its_base(adapter_pair):
    base_path, adapter_path = adapter_pair
    adapter, base = open_source(adapter_path), open_source(base_path)
    assert isinstance(adapter, AdapterSource) and adapter.format == "lora"
    assert adapter.measured_as_factors and not adapter.covers_every_layer
    assert adapter.check_standalone() is None
    record = next(adapter.tensors())
    f = record.delta.factors()
    assert (tuple(f.b.shape)[1], tuple(f.a.shape)[0]) == (4, 4) and f.scale == pytest.approx(8 / 4)
    attrs = adapter.extra_attrs()
    assert attrs == adapter.adapter_attrs()  # an unquantised base: the adapter's attrs alone
    assert (attrs["adapter"], attrs["lora_rank"], attrs["lora_alpha"], attrs["adapted_modules"]) == ("lora", 4, 8.0, 4)
    assert attrs["base_model"] == str(base_path.resolve())
    merged = adapter.merged_into(base)
    assert isinstance(merged, MergedSource) and merged.format == "safetensors+lora"
    assert not merged.measured_as_factors and merged.covers_every_layer
    assert merged.extra_attrs() == attrs and merged.decoder_versions() == base.decoder_versions() == ""
    records = {r.name: r for r in merged.tensors()}
    bases = {r.name: r for r in base.tensors()}
    q = records["model.layers.0.self_attn.q_proj.weight"]
    assert isinstance(q, MergedRecord) and q.base_record is not None and q.base_record.name == q.name
    torch.testing.assert_close(q.read(), bases[q.name].read() + adapter_record(adapter, q.name).read())
    assert records["model.layers.0.self_attn.k_proj.weight"].base_record is None


def adapter_record(adapter, name):
    return next(r for r in adapter.tensors() if r.name == name)


def test_a_dora_adapter_refuses_to_be_measured_alone_with_the_text_weight_stats_gave(tmp_path):
    base_path, adapter_path = write_tiny_adapter(tmp_path, "llama", use_dora=True, target_modules=["q_proj"])
    src = open_source(adapter_path)
    with pytest.raises(AdapterBaseError) as err:
        src.check_standalone()
    assert (err.value.adapter, err.value.base) == (src.location, str(base_path))
    assert str(err.value) == (
        f"LoRA adapter {src.location!r} (base {str(base_path)!r}): a DoRA adapter (use_dora) rescales each row of "
        "base + s*B*A by its stored magnitude, so its update cannot be measured without the base weights. Compare "
        "it with its base: toolkit.compare(base, adapter), or toolkit.compare(adapter) to open the recorded base")
    with pytest.raises(AdapterBaseError, match="a DoRA adapter"):  # what weight_stats raises, before any work
        toolkit.weight_stats(src, progress=False, cache=False)
