"""The 7B-shapes mode of ``bench_scale.py`` (``--shapes 7b``): all metrics against the linear-algebra floor
and against WeightWatcher.

Qwen2.5-7B's matrix shapes (hidden 3584, intermediate 18944, 28 heads, 4
key-value heads, q/k/v biases), ``--layers N`` of them (default 28), random
bf16 weights, generated untimed into one safetensors file per layer. The
embedding and the LM head are left small (vocabulary 1024, tied): neither is
a component matrix, the toolkit never factorises them, and a 152064-row
embedding would add a matrix WeightWatcher factorises and the toolkit does
not. Modes, each a fresh process with the cache off and the same threads:

  floor     the linear algebra alone: for every component matrix (read and
            converted untimed), the smaller Gram matrix (NumPy ``x.T @ x``,
            BLAS syrk) and its ``eigvalsh`` (torch's LAPACK), in float64;
            ``floor32`` the product in float32, widened and diagonalised in
            float64 (what ``precision="float32"`` computes)
  all       ``weight_stats(folder)``: every default metric, float64
  all32     ``weight_stats(folder, precision="float32")``
  ww        WeightWatcher 0.7.7 ``analyze()`` of ``model.model.layers`` (the
            same 7 matrices a layer) on ``--ww-layers`` layers (default 1),
            after an untimed ``from_pretrained``; its own venv

Targets (issue 19): all <= 1.15x floor; all32 <= all / 2; per layer, WW /
all >= 10x and WW / all32 >= 20x; peak RSS <= 3 x the largest matrix in
float64 + 1 GiB.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import _harness as H

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 1024,  # see the module docstring: not a component matrix
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}
LARGEST_F64 = 18944 * 3584 * 8
RSS_LIMIT = 3 * LARGEST_F64 + H.GIB
MODES = ["floor", "floor32", "all", "all32", "ww"]


def config(layers: int) -> dict:
    return {**QWEN25_7B, "num_hidden_layers": layers}


def layer_shapes(cfg: dict, i: int) -> list[tuple[str, tuple[int, ...]]]:
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    p = f"model.layers.{i}."
    return [
        (p + "input_layernorm.weight", (h,)),
        (p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.q_proj.bias", (h,)),
        (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.k_proj.bias", (kv,)),
        (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.v_proj.bias", (kv,)),
        (p + "self_attn.o_proj.weight", (h, h)),
        (p + "post_attention_layernorm.weight", (h,)),
        (p + "mlp.gate_proj.weight", (inter, h)),
        (p + "mlp.up_proj.weight", (inter, h)),
        (p + "mlp.down_proj.weight", (h, inter)),
    ]


def generate(folder: Path, layers: int) -> None:
    """One safetensors file per layer (plus one for the embedding and final norm), and the index."""
    import torch
    from safetensors.torch import save_file

    H.set_threads(None)
    cfg = config(layers)
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    n = layers + 1
    weight_map, total = {}, 0
    for s in range(n):
        if s == 0:
            spec = [("model.embed_tokens.weight", (cfg["vocab_size"], cfg["hidden_size"])),
                    ("model.norm.weight", (cfg["hidden_size"],))]
        else:
            spec = layer_shapes(cfg, s - 1)
        tensors = {}
        for name, shape in spec:
            if name.endswith("norm.weight"):
                tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
            else:
                tensors[name] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
            total += 2 * tensors[name].numel()
        fname = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
        save_file(tensors, str(folder / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in tensors})
        del tensors
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    H.emit(shards=n, total_bytes=total)


def child_floor(folder: Path, threads: int | None, precision: str) -> None:
    """Gram + eigvalsh of every component matrix, each alone, timed; reading and conversion untimed."""
    import numpy as np
    import torch
    from safetensors import safe_open
    from threadpoolctl import threadpool_limits

    H.set_threads(threads)
    dtype = np.float64 if precision == "float64" else np.float32
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    names = sorted(n for n in weight_map if n.endswith("_proj.weight"))
    total, gram_s, eig_s = 0.0, 0.0, 0.0
    with threadpool_limits(limits=torch.get_num_threads(), user_api="blas"):
        for name in names:
            with safe_open(str(folder / weight_map[name]), framework="pt") as fh:
                x = fh.get_tensor(name).to(torch.float64 if dtype == np.float64 else torch.float32).numpy()
            t0 = time.perf_counter()
            g = x @ x.T if x.shape[0] <= x.shape[1] else x.T @ x
            t1 = time.perf_counter()
            torch.linalg.eigvalsh(torch.from_numpy(g.astype(np.float64, copy=False)))
            t2 = time.perf_counter()
            gram_s, eig_s, total = gram_s + t1 - t0, eig_s + t2 - t1, total + t2 - t0
            del x, g
    H.emit(seconds=total, gram_s=gram_s, eig_s=eig_s, matrices=len(names))


def child_toolkit(folder: Path, device: str, threads: int | None, precision: str) -> None:
    import xarray as xr

    import toolkit

    toolkit.open_source(str(folder))  # one-time imports of a session (transformers' config classes), untimed
    xr.Dataset({"x": ("a", [1.0])})  # xarray's first Dataset imports dask.array: one-time, untimed
    H.set_threads(threads)
    t0 = time.perf_counter()
    ds = toolkit.weight_stats(str(folder), device=device, progress=False, cache=False, precision=precision)
    seconds = time.perf_counter() - t0
    H.emit(seconds=seconds, cells=int(ds.stable_rank.notnull().sum()),
           alpha=ds.alpha.values.tolist(), stable_rank=ds.stable_rank.values.tolist(),
           effective_rank=ds.effective_rank.values.tolist())


def child_ww(folder: Path, device: str, threads: int | None, layers: int) -> None:
    """WeightWatcher's analyze() of the first ``layers`` decoder layers (7 matrices each)."""
    import logging

    import torch
    import weightwatcher as ww
    from transformers import AutoModelForCausalLM

    logging.getLogger("weightwatcher").setLevel(logging.ERROR)
    H.set_threads(threads)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if device != "cpu":
        model = model.to(device)
    load = time.perf_counter() - t0
    blocks = torch.nn.ModuleList(model.model.layers[:layers])
    t0 = time.perf_counter()
    details = ww.WeightWatcher(model=blocks).analyze()
    seconds = time.perf_counter() - t0
    H.emit(seconds=seconds, load_s=load, layers=layers, matrices=len(details))


def report(runs: dict, layers: int, ww_layers: int) -> tuple[list, list, dict]:
    """Rows of the 7B table, the misses, and the figures."""
    med = {m: H.median_of(rs, "seconds") for m, rs in runs.items() if rs}
    rss = {m: max(r["peak_rss"] for r in rs) for m, rs in runs.items() if rs}
    rows, misses, figures = [], [], {"layers": layers, "ww_layers": ww_layers, "seconds": med, "peak_rss": rss}

    def row(name, t, per_layer, ratio, target, ok, peak):
        rows.append([name, f"{t:.1f} s", f"{per_layer:.1f} s", ratio, target if ok is None else
                     f"{target} {H.verdict(ok)}", "-" if peak is None else H.fmt_bytes(peak),
                     "-" if peak is None else f"<= {H.fmt_bytes(RSS_LIMIT)} {H.verdict(peak <= RSS_LIMIT)}"])
        if ok is False:
            misses.append(f"{name}: {ratio}, target {target}")
        if peak is not None and peak > RSS_LIMIT:
            misses.append(f"{name}: peak RSS {H.fmt_bytes(peak)} > {H.fmt_bytes(RSS_LIMIT)}")

    for m in ("floor", "floor32"):
        if m in med:
            row(m, med[m], med[m] / layers, "-", "-", None, None)
    if "all" in med and "floor" in med:
        r = med["all"] / med["floor"]
        row("all (float64)", med["all"], med["all"] / layers, f"{r:.2f}x floor", "<= 1.15x", r <= 1.15, rss["all"])
    if "all32" in med:
        ref = med.get("all")
        r = None if ref is None else ref / med["all32"]
        row("all32 (float32)", med["all32"], med["all32"] / layers,
            "-" if r is None else f"{r:.2f}x faster than float64", ">= 2x", None if r is None else r >= 2,
            rss["all32"])
        if "floor32" in med:
            rows[-1][3] += f"; {med['all32'] / med['floor32']:.2f}x floor32"
    if "ww" in med:
        ww_layer = med["ww"] / ww_layers
        row(f"WeightWatcher ({ww_layers} layer{'s' if ww_layers > 1 else ''})", med["ww"], ww_layer, "-", "-",
            None, None)
        for m, target in (("all", 10.0), ("all32", 20.0)):
            if m in med:
                speed = ww_layer / (med[m] / layers)
                figures[f"ww_speedup_{m}"] = speed
                rows.append([f"WW / {m}, per layer", "", "", f"{speed:.1f}x faster", f">= {target:g}x "
                             f"{H.verdict(speed >= target)}", "", ""])
                if speed < target:
                    misses.append(f"WW / {m}: {speed:.1f}x, target {target:g}x")
    return rows, misses, figures


def agreement(runs: dict) -> list[str]:
    """float32 against float64 on the same matrices: the largest deviations."""
    import math

    if not runs.get("all") or not runs.get("all32"):
        return []
    a, b = runs["all"][0], runs["all32"][0]
    lines = []
    for key, kind, target in (("alpha", "abs", 0.01), ("stable_rank", "rel", 1e-4), ("effective_rank", "rel", 1e-4)):
        devs = []
        for r64, r32 in zip(sum(a[key], []), sum(b[key], []), strict=True):
            if r64 is None or r32 is None or not (math.isfinite(r64) and math.isfinite(r32)):
                continue
            devs.append(abs(r32 - r64) if kind == "abs" else abs(r32 - r64) / abs(r64))
        worst = max(devs, default=float("nan"))
        lines.append(f"float32 vs float64, {key}: max {kind} deviation {worst:.2g} over {len(devs)} matrices "
                     f"(target {target:g}) {H.verdict(worst <= target)}")
    return lines
