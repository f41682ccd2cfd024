"""Mutated configs of adapters, quantised checkpoints and mixture-of-experts models, measured in a
memory-limited worker process (hypothesis), as :mod:`test_fuzz_sources` mutates the files' headers.

Keys of ``adapter_config.json``, of a ``quantization_config`` (FP8, GPTQ,
compressed-tensors) and of an MoE ``config.json`` are set to hostile values
(None, strings, lists, regular expressions that do not compile, 0, -1, 2^30,
10^9, NaN...) or dropped, and ``toolkit.weight_stats`` runs on the result in
one worker whose address space is limited to what it held after measuring
the originals plus 256 MB (:mod:`_fuzz_worker`), with a time limit per
input. Every outcome must be a :class:`~toolkit.errors.ToolkitError` naming
the checkpoint, or the right numbers for the config given:

- an adapter: each cell's Frobenius norm of ΔW = s·B·A from the stored
  factors, with ``peft``'s own rules (``get_pattern_key`` for the rank and
  alpha patterns, ``check_target_module_exists`` for the adapted modules,
  rsLoRA's scaling; fan_in_fan_out ignored on the llama's ``nn.Linear``);
- FP8: numpy's fp8 x scale[i // b0, j // b1] for the block size given;
- GPTQ: numpy's scale x (code − zero) for the bits, group size, zero
  convention and ``g_idx`` given;
- compressed-tensors: the library's own decompression under the mutated
  args, where the library accepts them;
- an MoE config: the numbers of the unmutated config (the weights are the
  same, and a config that would cut them otherwise must be refused).

The examples are derandomised; ``TOOLKIT_FUZZ_EXAMPLES=<n>`` runs ``n`` random ones per property.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _edited import edited
from _fuzz_worker import Worker, log, serve

_RANDOM = int(os.environ.get("TOOLKIT_FUZZ_EXAMPLES", "0"))


def _settings(examples: int):
    return settings(
        max_examples=_RANDOM or examples, deadline=None, derandomize=not _RANDOM, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


# -- the worker (this file run as a script) --------------------------------------------------------------------------


def _values(da) -> list:
    return [None if math.isnan(v) else float(v) for v in np.asarray(da.values, dtype=np.float64).ravel()]


def _measure(request: dict) -> dict:
    """``weight_stats`` of one checkpoint: the Frobenius norm of every cell (and expert), or the error."""
    import traceback
    import warnings

    import toolkit
    from toolkit.errors import ToolkitError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = toolkit.weight_stats(request["path"], metrics=["frobenius_norm"], progress=False, cache=False)
        out = {"kind": "ok", "layers": ds.layer.values.tolist(), "components": ds.component.values.tolist(),
               "values": _values(ds.frobenius_norm)}
        if "frobenius_norm_per_expert" in ds:
            out["experts"] = _values(ds.frobenius_norm_per_expert)
        return out
    except ToolkitError as exc:
        return {"kind": "typed", "type": type(exc).__name__, "message": str(exc)[:2000]}
    except BaseException as exc:  # noqa: BLE001 - anything else is what this test looks for
        return {"kind": "other", "type": type(exc).__name__, "message": str(exc)[:500],
                "traceback": traceback.format_exc()[-4000:]}


# -- the parent side -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spawned():
    with Worker(__file__) as w:
        yield w


@pytest.fixture(scope="module")
def originals(spawned, tmp_path_factory):
    """One checkpoint of each kind, tiny: a llama LoRA adapter (and its base), FP8, GPTQ and compressed-tensors
    llamas, and Qwen3-MoE, gpt-oss and DeepSeek-V3 folders."""
    from _quant_writers import tiny_original, write_compressed, write_fp8, write_int
    from toolkit.testing import write_tiny_adapter, write_tiny_moe_checkpoint

    root = tmp_path_factory.mktemp("fuzz_configs")
    out = {"adapter": write_tiny_adapter(root / "lora", "llama", num_layers=1,
                                         rank_pattern={"layers.0.self_attn.q_proj": 2})[1]}
    original = tiny_original(root / "llama", num_layers=1)[0]
    out["fp8"] = write_fp8(root / "fp8", original)[0]
    out["gptq"] = write_int(root / "gptq", original, "gptq", act_order=True)[0]
    out["compressed"] = write_compressed(root / "ct", original, dict(num_bits=4, type="int", strategy="group",
                                                                     group_size=16, symmetric=False),
                                         "pack-quantized")[0]
    for family in ("qwen3_moe", "gpt_oss", "deepseek_v3"):
        out[family] = write_tiny_moe_checkpoint(root / family, family, num_layers=2)
    return out


@pytest.fixture(scope="module")
def worker(spawned, originals):
    spawned.originals = [{"path": str(p)} for p in originals.values()]
    return spawned


@pytest.fixture(scope="module")
def measured(worker, originals):
    """The outcome of each original (the reference of the MoE configs)."""
    got = {k: worker.run({"path": str(p)}) for k, p in originals.items()}
    assert all(g["kind"] == "ok" for g in got.values()), got
    return got


class Folders:
    """Fresh copies of a checkpoint folder with a mutated JSON file."""

    def __init__(self, root: Path):
        self.root, self.n = root, 0

    def copy(self, src: Path, name: str, edit) -> tuple[Path, dict]:
        self.n += 1
        folder = edited(src, self.root / f"c{self.n}", edit, config_name=name)
        return folder, json.loads((folder / name).read_text())


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return Folders(tmp_path_factory.mktemp("mutated"))


#: Values a hostile config holds.
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 70),
    st.sampled_from([0, 1, 2, 3, 4, 5, 6, 8, 9, 16, 17, 24, 32, 33, 64, 2**24, 2**30, 2**31, 10**7, 10**9, 2**62, -1]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(["(", "[", ".*", "q_proj", "v_proj", "all-linear", "fp8", "gptq", "awq", "e4m3", "e5m2", "group",
                     "channel", "tensor", "block", "int", "float", "pack-quantized", "int-quantized", "0", "Linear"]),
    st.lists(st.one_of(st.integers(-1, 40), st.sampled_from([2**30, 10**9])), max_size=3),
    st.lists(st.sampled_from(["q_proj", "k_proj", "(", "re:.*", "layers.0.self_attn.q_proj", "Linear"]), max_size=3),
    st.dictionaries(st.sampled_from(["q_proj", "(x", "layers.0.self_attn.q_proj", ".*", "v_proj"]),
                    st.one_of(st.none(), st.integers(-1, 8), st.floats(), st.lists(st.integers(0, 4), max_size=2)),
                    max_size=2),
)


def edits(keys):
    """Lists of ``(key, value)`` (a value of :data:`HOSTILE`, or ``...``: drop the key)."""
    return st.lists(st.tuples(st.sampled_from(keys), st.one_of(HOSTILE, st.just(...))), min_size=1, max_size=3)


def _apply(cfg: dict, changes) -> dict:
    for key, value in changes:
        *parents, last = key.split("/")
        node = cfg
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        if value is ...:
            node.pop(last, None)
        else:
            node[last] = value
    return cfg


def _check(reply: dict, folder: Path, what, reference=None) -> None:
    """Typed (naming the folder) or ok with ``reference(reply)`` returning ``""`` (else what differs)."""
    log(folder, reply, what)
    assert reply["kind"] in ("ok", "typed"), (what, reply)
    if reply["kind"] == "typed":
        assert str(folder) in reply["message"], ("the error does not name the checkpoint", what, reply)
    elif reference is not None:
        wrong = reference(reply)
        assert not wrong, (what, wrong)
    shutil.rmtree(folder)


def _cells(reply: dict) -> dict:
    n = len(reply["components"])
    return {(layer, comp): reply["values"][i * n + j] for i, layer in enumerate(reply["layers"])
            for j, comp in enumerate(reply["components"])}


def _compare(reply: dict, want: dict, rtol: float = 1e-5) -> str:
    """What differs between the reply's cells and ``want`` (``{(layer, component): norm}``; others NaN)."""
    for cell, got in _cells(reply).items():
        expected = want.get(cell)
        if (got is None) != (expected is None) or (got is not None and not math.isclose(got, expected, rel_tol=rtol,
                                                                                        abs_tol=1e-12)):
            return f"{cell}: {got} for {expected}"
    return ""


# -- adapter configs -------------------------------------------------------------------------------------------------

ADAPTER_KEYS = ["r", "lora_alpha", "rank_pattern", "alpha_pattern", "target_modules", "exclude_modules",
                "layers_to_transform", "layers_pattern", "use_rslora", "use_dora", "fan_in_fan_out", "peft_type",
                "modules_to_save", "base_model_name_or_path", "lora_bias"]
_LLAMA = {"q_proj": "attn.q", "k_proj": "attn.k", "v_proj": "attn.v", "o_proj": "attn.o", "up_proj": "mlp.up",
          "down_proj": "mlp.down", "gate_proj": "mlp.gate"}


def _cell(module: str) -> tuple[int, str]:
    """The (layer, component) of a llama module (``model.layers.0.self_attn.q_proj``)."""
    parts = module.split(".")
    return int(parts[2]), _LLAMA[parts[-1]]


def _peft_reference(adapter: Path, cfg: dict):
    """The check of a reply against ΔW = s·B·A with peft's rules for ``cfg``."""
    from peft.tuners.tuners_utils import check_target_module_exists
    from peft.utils.other import get_pattern_key
    from safetensors.torch import load_file

    def reference(reply: dict) -> str:
        stored = load_file(str(adapter / "adapter_model.safetensors"))
        target = types.SimpleNamespace(**{k: cfg.get(k) for k in ("target_modules", "exclude_modules",
                                                                  "modules_to_save", "layers_to_transform",
                                                                  "layers_pattern", "target_parameters")})
        want = {}
        try:
            for key in stored:
                if ".lora_A." not in key:
                    continue
                module = key.removeprefix("base_model.model.").split(".lora_A.")[0]
                if target.target_modules is not None:
                    found = check_target_module_exists(target, module)
                    if not found or type(found).__name__ == "_ExcludedModule":
                        return f"peft does not adapt {module} under this config, the toolkit measured it"
                pattern = get_pattern_key((cfg.get("rank_pattern") or {}).keys(), module)
                r = (cfg.get("rank_pattern") or {}).get(pattern, cfg["r"])
                pattern = get_pattern_key((cfg.get("alpha_pattern") or {}).keys(), module)
                alpha = (cfg.get("alpha_pattern") or {}).get(pattern, cfg["lora_alpha"])
                scale = alpha / (math.sqrt(r) if cfg.get("use_rslora") else r)
                a, b = stored[key].double(), stored[key.replace("lora_A", "lora_B")].double()
                delta = scale * (b @ a).numpy()
                # entries beyond float32 (an alpha of 1e40): the float32 pipeline reads NaN/Inf, with that reason
                fits = np.abs(delta).max() <= np.finfo(np.float32).max
                want[_cell(module)] = float(np.linalg.norm(delta)) if fits else None
        except Exception as exc:  # noqa: BLE001 - peft cannot read this config: the toolkit must not have either
            return f"peft's rules fail on this config ({type(exc).__name__}: {exc}), the toolkit measured it"
        return _compare(reply, want)

    return reference


@given(changes=edits(ADAPTER_KEYS))
@_settings(100)
def test_mutated_adapter_config(worker, originals, folders, changes):
    folder, cfg = folders.copy(originals["adapter"], "adapter_config.json", lambda c: _apply(c, changes))
    _check(worker.run({"path": str(folder)}), folder, changes, _peft_reference(folder, cfg))


# -- quantization configs --------------------------------------------------------------------------------------------

FP8_KEYS = ["quantization_config/" + k for k in ("weight_block_size", "fmt", "quant_method", "activation_scheme")] + [
    "quantization_config"]


def _fp8_reference(folder: Path, cfg: dict):
    from safetensors.torch import load_file

    def reference(reply: dict) -> str:
        qc = cfg.get("quantization_config")
        block = qc.get("weight_block_size") if isinstance(qc, dict) else None
        want = {}
        for name, w in load_file(str(folder / "model.safetensors")).items():
            if not name.endswith("_scale_inv"):
                continue
            q = load_file(str(folder / "model.safetensors"))[name.removesuffix("_scale_inv")].float().double().numpy()
            s = w.double().numpy()
            if block is None:
                if s.size != 1:
                    return f"{name}: a grid of scales read without a block size"
                full = q * s.reshape(())
            else:
                rows, cols = q.shape
                full = q * s[np.arange(rows)[:, None] // block[0], np.arange(cols)[None, :] // block[1]]
            want[_cell(name.removesuffix(".weight_scale_inv"))] = float(np.linalg.norm(full))
        return _compare(reply, want)

    return reference


GPTQ_KEYS = ["quantization_config/" + k for k in ("bits", "group_size", "desc_act", "sym", "checkpoint_format",
                                                  "quant_method")] + ["quantization_config"]


def _unpack(words: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """GPTQ's packing, undone with numpy: value k of a word at bits k*b is row (axis 0) or column (axis 1)
    ``word's index * 32/b + k``."""
    w = words.astype(np.int64) & 0xFFFFFFFF
    values = np.stack([(w >> (k * bits)) & ((1 << bits) - 1) for k in range(32 // bits)], axis=axis + 1)
    shape = list(words.shape)
    shape[axis] *= 32 // bits
    return values.reshape(shape)


def _gptq_reference(folder: Path, cfg: dict):
    from safetensors.torch import load_file

    def reference(reply: dict) -> str:
        qc = cfg["quantization_config"]
        bits, v1 = qc["bits"], (qc.get("checkpoint_format") or "gptq") == "gptq"
        t = load_file(str(folder / "model.safetensors"))
        want = {}
        for name in t:
            if not name.endswith(".qweight"):
                continue
            prefix = name.removesuffix(".qweight")
            q = _unpack(t[name].numpy(), bits, 0)
            z = _unpack(t[f"{prefix}.qzeros"].numpy(), bits, 1)[:, : q.shape[1]] + (1 if v1 else 0)
            g = t[f"{prefix}.g_idx"].numpy().astype(np.int64)
            w = (q - z[g]) * t[f"{prefix}.scales"].double().numpy()[g]
            want[_cell(prefix)] = float(np.linalg.norm(w))
        return _compare(reply, want)

    return reference


_ARGS = "quantization_config/config_groups/group_0/weights/"
COMPRESSED_KEYS = [_ARGS + k for k in ("num_bits", "type", "strategy", "group_size", "block_structure", "symmetric")] \
    + ["quantization_config/format", "quantization_config/config_groups/group_0/targets",
       "quantization_config/config_groups/group_0/weights", "quantization_config/config_groups"]


def _compressed_reference(folder: Path, cfg: dict):
    def reference(reply: dict) -> str:
        from compressed_tensors.compressors import BaseCompressor
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        from safetensors.torch import load_file

        qc = cfg["quantization_config"]
        try:
            args = QuantizationArgs(**qc["config_groups"]["group_0"]["weights"])
            compressor = BaseCompressor.load_from_registry(qc["format"])
            scheme = QuantizationScheme(targets=["Linear"], weights=args)
            t = load_file(str(folder / "model.safetensors"))
            want = {}
            for name in [n for n in t if n.endswith(".weight_scale")]:
                prefix = name.removesuffix(".weight_scale")
                state = {k.removeprefix(prefix + "."): v for k, v in t.items() if k.startswith(prefix + ".")}
                w = compressor.decompress(state, scheme)["weight"].double().numpy()
                want[_cell(prefix)] = float(np.linalg.norm(w))
        except Exception:  # noqa: BLE001 - the library refuses these args: no reference value to compare
            return ""
        return _compare(reply, want, rtol=1e-4)

    return reference


#: ``{kind: (keys to mutate, reference)}`` of the quantised checkpoints.
QUANTIZED = {"fp8": (FP8_KEYS, _fp8_reference), "gptq": (GPTQ_KEYS, _gptq_reference),
             "compressed": (COMPRESSED_KEYS, _compressed_reference)}


@pytest.mark.parametrize("kind", list(QUANTIZED))
@given(data=st.data())
@_settings(60)
def test_mutated_quantization_config(worker, originals, folders, kind, data):
    keys, reference = QUANTIZED[kind]
    changes = data.draw(edits(keys))
    folder, cfg = folders.copy(originals[kind], "config.json", lambda c: _apply(c, changes))
    _check(worker.run({"path": str(folder)}), folder, changes, reference(folder, cfg))


# -- MoE configs -----------------------------------------------------------------------------------------------------

MOE_KEYS = {
    "qwen3_moe": ["num_experts", "moe_intermediate_size", "num_experts_per_tok", "decoder_sparse_step",
                  "mlp_only_layers", "intermediate_size", "hidden_size", "num_attention_heads", "num_key_value_heads",
                  "head_dim", "num_hidden_layers"],
    "gpt_oss": ["num_local_experts", "intermediate_size", "num_experts_per_tok", "hidden_size", "head_dim",
                "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "layer_types"],
    "deepseek_v3": ["n_routed_experts", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace",
                    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank", "n_group",
                    "topk_group", "num_experts_per_tok", "hidden_size", "num_attention_heads"],
}


def _same_as(original: dict):
    def reference(reply: dict) -> str:
        for key in ("layers", "values", "experts"):
            a, b = reply.get(key), original.get(key)
            if key == "values" and reply["components"] != original["components"]:
                return f"components {reply['components']} for {original['components']}"
            if a != b and not (a is not None and b is not None and len(a) == len(b) and all(
                    (x is None and y is None) or (x is not None and y is not None and math.isclose(x, y, rel_tol=1e-6))
                    for x, y in zip(a, b, strict=True))):
                return f"{key} differ from the unmutated config's"
        return ""

    return reference


@pytest.mark.parametrize("family", list(MOE_KEYS))
@given(data=st.data())
@_settings(40)
def test_mutated_moe_config(worker, originals, measured, folders, family, data):
    changes = data.draw(edits(MOE_KEYS[family]))
    folder, _ = folders.copy(originals[family], "config.json", lambda c: _apply(c, changes))
    _check(worker.run({"path": str(folder)}), folder, changes, _same_as(measured[family]))


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    import toolkit  # noqa: F401  (imported now, while the parent writes the files)

    serve(_measure)
