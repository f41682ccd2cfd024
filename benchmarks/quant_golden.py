"""Golden GPTQ and AWQ checkpoints packed and unpacked by the formats' own libraries, for the suite.

The toolkit dequantises GPTQ and AWQ checkpoints itself. This script makes the reference with the
formats' own code, on the CPU, in its own venv (``benchmarks/.quant-venv``, created on first use):

  GPTQ  AutoGPTQ 0.7.1, ``auto_gptq/nn_modules/qlinear/qlinear_cuda.py``: ``QuantLinear.pack`` writes
        ``qweight``, ``qzeros`` (v1: zero - 1), ``scales`` and ``g_idx`` (act-order included), and
        ``QuantLinear.forward`` of the identity (its CPU path: unpack, ``scales[g_idx] * (q - zeros)``)
        gives the dequantised matrix. The module file is loaded directly: the package's ``__init__``
        imports transformers names that transformers 4.5x and 5 no longer have (``no_init_weights``),
        and the CUDA kernels are not used on the CPU.
  AWQ   AutoAWQ 0.2.9: ``WQLinear_GEMM.from_linear`` packs (GEMM layout, order [0, 2, 4, 6, 1, 3, 5, 7]),
        ``awq.utils.packing_utils.dequantize_gemm`` unpacks (its float16 scales taken as float32, so the
        product is exact: the stored scales are float16 values either way).

Each case is a tiny one-layer llama (hidden 32, 2 heads of 16, intermediate 64) whose seven linear
weights are W = s (q - z) for integer codes q, zeros z and float16 scales s drawn here; the library
packs W (recovering q exactly) and its unpacking gives the expected float32 W. Written to
``tests/data/quant_oracle/<case>/``: ``config.json`` (with ``quantization_config``),
``model.safetensors`` (the packed tensors and the unquantised rest), ``expected.safetensors``
(the library's dequantised weights, (out, in)) and ``provenance.json`` (library versions, the
functions used, the command, the date).

GPTQ v2 zeros (``checkpoint_format="gptq_v2"``) are GPTQModel's; GPTQModel 7.7 is a source
distribution that builds CUDA extensions, so that case keeps its codes-based test only
(``tests/sources/test_quantized_sources.py``).

Usage::

    .venv/bin/python benchmarks/quant_golden.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

HERE = Path(__file__).resolve().parent
VENV = HERE / ".quant-venv"
PY = VENV / "bin" / "python"
# the formats' packages without their GPU dependencies (triton, CUDA kernels), and what AutoAWQ's import needs
PACKAGES = [["torch==2.13.0"], ["--no-deps", "autoawq==0.2.9", "auto-gptq==0.7.1"],
            ["transformers==5.24.0", "accelerate", "datasets", "zstandard", "safetensors", "numpy"]]
OUT = H.ROOT / "tests" / "data" / "quant_oracle"
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj")
#: case -> (method, bits, group size, act order)
CASES = {
    "gptq_int4": ("gptq", 4, 16, False),
    "gptq_int4_act_order": ("gptq", 4, 16, True),
    "gptq_int8": ("gptq", 8, 16, False),
    "gptq_int2_group32": ("gptq", 2, 32, False),
    "awq_int4": ("awq", 4, 16, False),
}


def ensure_venv() -> None:
    H.ensure_venv(VENV, PACKAGES, "import awq, torch, safetensors", "AutoGPTQ 0.7.1, AutoAWQ 0.2.9, CPU torch")


# ---------------------------------------------------------------- child (quant venv)


def _load_module(package: str, relative: str):
    """Import one module file of an installed package without running the package's ``__init__``."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    root = Path(spec.submodule_search_locations[0]) if spec else None
    if root is None:
        raise ModuleNotFoundError(package)
    mod_spec = importlib.util.spec_from_file_location(f"_oracle_{package}", root / relative)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def child(original: str, out: str, command: str) -> None:
    import importlib.metadata as md

    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    tensors = load_file(str(Path(original) / "model.safetensors"))
    config = json.loads((Path(original) / "config.json").read_text())
    gptq = _load_module("auto_gptq", "nn_modules/qlinear/qlinear_cuda.py")
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.utils.packing_utils import dequantize_gemm

    for case, (method, bits, group, act_order) in CASES.items():
        gen = torch.Generator().manual_seed(sum(map(ord, case)))
        packed, expected = {}, {}
        for name, w in tensors.items():
            if not (name.endswith(".weight") and name.split(".")[-2] in LINEAR):
                packed[name] = w
                continue
            n_out, n_in = w.shape
            groups = n_in // group
            q = torch.randint(0, 1 << bits, (n_out, n_in), generator=gen)
            z = torch.randint(1, 1 << bits, (groups, n_out), generator=gen)  # >= 1: GPTQ v1 stores z - 1
            s = (0.01 + 0.02 * torch.rand(groups, n_out, generator=gen)).half().float()  # float16 values
            g_idx = torch.arange(n_in) // group
            if act_order:
                g_idx = g_idx[torch.randperm(n_in, generator=gen)]
            weight = ((q - z.t()[:, g_idx]).float() * s.t()[:, g_idx])  # exact in float32
            linear = torch.nn.Linear(n_in, n_out, bias=False)
            linear.weight.data = weight
            prefix = name.removesuffix(".weight")
            if method == "gptq":
                layer = gptq.QuantLinear(bits, group, n_in, n_out, bias=False, weight_dtype=torch.float32)
                layer.pack(linear, s.t().contiguous(), z.t().float().contiguous(), g_idx.to(torch.int32))
                with torch.no_grad():
                    deq = layer(torch.eye(n_in)).t().contiguous()
                packed.update({f"{prefix}.qweight": layer.qweight, f"{prefix}.qzeros": layer.qzeros,
                               f"{prefix}.scales": layer.scales.half(), f"{prefix}.g_idx": layer.g_idx.to(torch.int32)})
            else:
                layer = WQLinear_GEMM.from_linear(linear, bits, group, scales=s, zeros=z.float())
                deq = dequantize_gemm(layer.qweight, layer.qzeros, layer.scales.float(), bits, group).t().contiguous()
                packed.update({f"{prefix}.qweight": layer.qweight, f"{prefix}.qzeros": layer.qzeros,
                               f"{prefix}.scales": layer.scales})
            assert torch.equal(deq, weight), f"{case} {name}: the library's round trip is not exact"
            expected[name] = deq
        qc = ({"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": False,
               "checkpoint_format": "gptq"} if method == "gptq" else
              {"quant_method": "awq", "bits": bits, "group_size": group, "zero_point": True, "version": "gemm"})
        folder = Path(out) / case
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in packed.items()}, str(folder / "model.safetensors"))
        save_file(expected, str(folder / "expected.safetensors"))
        (folder / "config.json").write_text(json.dumps({**config, "quantization_config": qc}, indent=2) + "\n")
        how = ({"pack": "auto_gptq.nn_modules.qlinear.qlinear_cuda.QuantLinear.pack (module file loaded directly)",
                "unpack": "QuantLinear.forward(torch.eye(in)) on the CPU, transposed"} if method == "gptq" else
               {"pack": "awq.modules.linear.gemm.WQLinear_GEMM.from_linear",
                "unpack": "awq.utils.packing_utils.dequantize_gemm(qweight, qzeros, scales.float(), bits, group), "
                          "transposed"})
        versions = {p: md.version(p) for p in ("auto-gptq", "autoawq", "torch", "transformers")}
        (folder / "provenance.json").write_text(json.dumps({
            "case": case, "method": method, "bits": bits, "group_size": group, "act_order": act_order, **how,
            "versions": versions, "command": command, "date": dt.datetime.now().isoformat(timespec="seconds"),
            "machine": H.machine()}, indent=2) + "\n")
        print(f"{case}: {len(expected)} matrices", flush=True)


# ---------------------------------------------------------------- driver


def tiny_llama(folder: Path) -> Path:
    """A one-layer llama whose every linear has sides that are multiples of 32 (AutoGPTQ packs 32 / bits
    output columns of zeros per int32: 32 k/v rows at least)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--original", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(OUT), help="folder of the cases (default tests/data/quant_oracle)")
    ap.add_argument("--command", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.original, args.out, args.command)
        return 0
    ensure_venv()
    command = ".venv/bin/python benchmarks/quant_golden.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="quant-golden-") as tmp:
        original = tiny_llama(Path(tmp) / "llama")
        if Path(args.out).exists():
            shutil.rmtree(args.out)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([str(PY), str(Path(__file__).resolve()), "--child", "1", "--original", str(original),
                        "--out", args.out, "--command", command], check=True, env=env, cwd=tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
