"""LoRA adapters as sources, checked against peft's own merge (``merge_and_unload``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import peft
import pytest
import torch

import toolkit
from toolkit.errors import AdapterBaseError
from toolkit.sources import open_source
from toolkit.testing import write_tiny_adapter


def _peft_delta(base, adapter) -> dict[str, torch.Tensor]:
    """peft's merged weights minus the base's, per parameter name (peft's own loader and merge)."""
    import transformers

    base_model = transformers.AutoModelForCausalLM.from_pretrained(base)
    before = {k: v.clone() for k, v in base_model.state_dict().items()}
    merged = peft.PeftModel.from_pretrained(base_model, adapter).merge_and_unload().state_dict()
    return {k: merged[k] - before[k] for k in before if not torch.equal(merged[k], before[k])}, before, merged


CASES = {
    "lora": ("llama", dict(rank_pattern={"layers.1.self_attn.q_proj": 2}, alpha_pattern={"v_proj": 3})),
    "rslora": ("llama", dict(r=8, lora_alpha=4, use_rslora=True)),
    "phi3": ("phi3", dict()),
    "gpt2": ("gpt2", dict()),
}


@pytest.fixture(scope="module", params=list(CASES))
def written(request, tmp_path_factory):
    family, kw = CASES[request.param]
    base, adapter = write_tiny_adapter(tmp_path_factory.mktemp(request.param), family, **kw)
    delta, before, merged = _peft_delta(base, adapter)
    return request.param, base, adapter, delta, before


def test_delta_equals_peft_merge(written):
    """Each record's ΔW equals peft's merged weight minus the base (rel 1e-6), with patterns and rsLoRA."""
    _, _, adapter, delta, _ = written
    src = open_source(adapter)
    records = {r.name: r for r in src.tensors()}
    assert set(records) == set(delta)
    for name, rec in records.items():
        got, want = rec.read(), delta[name]
        assert tuple(got.shape) == tuple(want.shape) == tuple(rec.shape)
        assert torch.linalg.norm(got - want) <= 1e-6 * torch.linalg.norm(want)


def test_weight_stats_of_delta(written):
    """Cells are the components of ΔW (fused ones split): norms as numpy computes them on peft's ΔW,
    ranks exact (= r), NaN where no module was adapted."""
    case, base, adapter, delta, _ = written
    ds = toolkit.weight_stats(adapter, metrics=["frobenius_norm", "spectral_norm", "stable_rank", "matrix_rank",
                                                "kurtosis"], progress=False, cache=False)
    full = toolkit.weight_stats(base, metrics=["frobenius_norm"], progress=False, cache=False)
    assert ds.attrs["format"] == "lora" and ds.attrs["base_model"] == str(base)
    np.testing.assert_array_equal(ds.n_rows.values[~np.isnan(ds.frobenius_norm.values)],
                                  full.n_rows.values[~np.isnan(ds.frobenius_norm.values)])
    plan = toolkit.collect.plan.plan_pieces(base, cache=False)
    checked = 0
    for t in plan.tensors:
        for p in t.pieces:
            got = ds.sel(layer=p.layer, component=p.component)
            if t.record.name not in delta:
                assert math.isnan(float(got.frobenius_norm))
                continue
            w = p.extract(delta[t.record.name]).double().numpy()
            s = np.linalg.svd(w, compute_uv=False)
            np.testing.assert_allclose(float(got.frobenius_norm), np.linalg.norm(w), rtol=1e-6)
            np.testing.assert_allclose(float(got.spectral_norm), s[0], rtol=1e-6)
            np.testing.assert_allclose(float(got.stable_rank), (s ** 2).sum() / s[0] ** 2, rtol=1e-6)
            r = 2 if case == "lora" and (p.layer, p.component) == (1, "attn.q") else (8 if case == "rslora" else 4)
            # exact: numpy on peft's float32 merged-minus-base sees rounding noise as rank, the factors do not
            assert int(got.matrix_rank) == min(r, *w.shape)
            checked += 1
    assert checked >= 4


def test_compare_base_with_adapter(written):
    """compare(base, adapter) measures base + ΔW: relative_change per cell and per tensor as computed
    from peft's merged model; unadapted tensors unchanged; compare(adapter) alone opens the recorded base."""
    _, base, adapter, delta, before = written
    ds = toolkit.compare(base, adapter, metrics=["relative_change"], progress=False, cache=False)
    plan = toolkit.collect.plan.plan_pieces(base, cache=False)
    for t in plan.tensors:
        for p in t.pieces:
            wb = p.extract(before[t.record.name]).double()
            dw = p.extract(delta[t.record.name]).double() if t.record.name in delta else torch.zeros_like(wb)
            want = float(torch.linalg.norm(dw) / torch.linalg.norm(wb))
            np.testing.assert_allclose(float(ds.relative_change.sel(layer=p.layer, component=p.component)), want,
                                       rtol=1e-5, atol=1e-12)
    changed = {str(n) for n, v in zip(ds.tensor.values, ds.tensor_relative_change.values, strict=True) if v > 0}
    assert changed == set(delta)
    alone = toolkit.compare(adapter, metrics=["relative_change"], progress=False, cache=False)
    np.testing.assert_array_equal(alone.relative_change.values, ds.relative_change.values)


def test_dora_merge_matches_peft(tmp_path):
    """DoRA: the merged weights equal peft's merge; weight_stats without the base is refused."""
    base, adapter = write_tiny_adapter(tmp_path, "llama", use_dora=True, target_modules=["q_proj", "down_proj"])
    delta, before, merged = _peft_delta(base, adapter)
    from toolkit.sources.lora import MergedSource

    src = MergedSource(open_source(base), open_source(adapter))
    for rec in src.tensors():
        if rec.name in delta:
            want = merged[rec.name]
            assert torch.linalg.norm(rec.read() - want) <= 1e-6 * torch.linalg.norm(want)
    with pytest.raises(AdapterBaseError, match=r"compare\(base, adapter\)"):
        toolkit.weight_stats(adapter, metrics=["frobenius_norm"], progress=False, cache=False)
    ds = toolkit.compare(base, adapter, metrics=["relative_change"], progress=False, cache=False)
    assert float(ds.relative_change.sel(layer=0, component="attn.q")) > 0
    assert float(ds.relative_change.sel(layer=0, component="attn.k")) == 0


def test_missing_base_says_how_to_pass_it(tmp_path):
    import json
    import shutil

    base, adapter = write_tiny_adapter(tmp_path, "llama", target_modules=["q_proj"])
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "nobody/no-such-model-here"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(AdapterBaseError, match="base=") as e:
        toolkit.weight_stats(adapter, progress=False, cache=False)
    assert e.value.base == "nobody/no-such-model-here"
    with pytest.raises(AdapterBaseError, match=r"compare\(base, adapter\)"):
        toolkit.compare(adapter, progress=False, cache=False)
    ds = toolkit.weight_stats(toolkit.sources.open_adapter(adapter, base=base), metrics=["matrix_rank"],
                              progress=False, cache=False)
    assert float(ds.matrix_rank.sel(layer=1, component="attn.q")) == 4
    shutil.rmtree(base)


class _Counting(toolkit.sources.Source):
    """A source that counts how often each stored tensor's bytes are read."""

    def __init__(self, inner):
        import dataclasses

        self.__dict__.update({k: getattr(inner, k) for k in ("location", "format", "config", "fingerprint",
                                                             "revision", "missing_config")})
        self._inner, self.reads = inner, {}

        def counted(name, read):
            def reader(*args):
                self.reads[name] = self.reads.get(name, 0) + 1
                return read(*args)
            return reader

        self._records = [dataclasses.replace(r, _reader=counted(r.name, r._reader),
                                             _row_reader=r._row_reader and counted(r.name, r._row_reader))
                         for r in inner.tensors()]

    def tensors(self):
        yield from self._records

    def files(self):
        return self._inner.files()


def test_compare_reads_each_base_tensor_once(tmp_path):
    base, adapter = write_tiny_adapter(tmp_path, "llama", target_modules=["q_proj", "v_proj"])
    counting = _Counting(open_source(base))
    toolkit.compare(counting, adapter, metrics=["relative_change"], progress=False, cache=False)
    assert counting.reads and set(counting.reads.values()) == {1}
    assert set(counting.reads) == {r.name for r in counting.tensors()}


def test_hub_adapter_repo_downloads_the_adapter_files():
    from toolkit.sources.hub import _wanted_files

    files = ["README.md", "adapter_config.json", "adapter_model.safetensors", "training_args.bin"]
    assert _wanted_files("org/lora", files, None) == ["adapter_config.json", "adapter_model.safetensors"]


@pytest.fixture(scope="module")
def llama_adapter(tmp_path_factory):
    return write_tiny_adapter(tmp_path_factory.mktemp("self_base"), "llama")


def _with_base(adapter, tmp_path, base: str, config_beside: bool):
    """A copy of ``adapter`` whose ``base_model_name_or_path`` is ``base`` (``{self}``: its own folder)."""
    import json
    import shutil

    folder = tmp_path / "adapter"
    shutil.copytree(adapter, folder)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = base.format(self=folder)
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    if config_beside:
        shutil.copy(Path(adapter).parent / "base" / "config.json", folder / "config.json")
    return folder


@pytest.mark.parametrize("config_beside", [True, False])
def test_an_adapter_whose_base_is_its_own_folder_is_a_typed_error(llama_adapter, tmp_path, config_beside):
    """Issue 35, class 6: no RecursionError (with config.json beside the factors) and no false "neither a local
    folder" (without it); weight_stats and compare both say the base is the adapter's own folder."""
    base, adapter = llama_adapter
    folder = _with_base(adapter, tmp_path, "{self}", config_beside)
    for call in (lambda: toolkit.weight_stats(folder, ["frobenius_norm"], progress=False, cache=False),
                 lambda: toolkit.compare(base, folder, ["relative_change"], progress=False, cache=False)):
        with pytest.raises(AdapterBaseError, match="is the adapter's own folder.*base='path/or/hub-id'") as err:
            call()
        assert err.value.base == str(folder)
        assert "neither a local folder" not in str(err.value)


def test_a_base_folder_without_config_is_named_as_a_local_folder(llama_adapter, tmp_path):
    _, adapter = llama_adapter
    empty = tmp_path / "empty_base"
    empty.mkdir()
    folder = _with_base(adapter, tmp_path, str(empty), False)
    with pytest.raises(AdapterBaseError, match="is a local folder without a config.json"):
        open_source(folder)
