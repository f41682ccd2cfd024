"""Reading checkpoints in place over HTTP (issue 26): bytes moved and time, against nginx on loopback.

Two benchmarks, each a fresh child process per measured run, the result cache off:

``deepseek``
    A DeepSeek-V3-shaped checkpoint as sparse files: transformers'
    ``DeepseekV3Config`` defaults (61 layers, 256 routed experts, MLA) with
    the published checkpoint's FP8 ``quantization_config``, the hub
    checkpoint's tensor names (per-expert ``mlp.experts.{e}.*_proj.weight``
    with their ``weight_scale_inv``, ``mlp.gate.weight`` in bf16,
    ``e_score_correction_bias``), shapes and dtypes, in 163 shards with an
    index, as the hub holds it (the multi-token-prediction layer 61 left out,
    as ``transformers`` leaves it out on load). Only the headers and the
    routers' bytes are written (random bf16): the rest are holes, so the disk
    holds a few hundred MB of ~690 GB. Served by nginx in the hub layout
    (``HF_ENDPOINT``), ``weight_stats(repo, components=["mlp.router"])`` must
    move at most 1.05 x (the routers' bytes + every header, the index and the
    config) and finish in under a minute; the same call on the local sparse
    folder gives the reference values (equal bit for bit).

``7b``
    Qwen2.5-7B's shapes (``_scale_7b.py``), ``--layers`` of them, served as
    a plain URL folder: ``weight_stats(url)`` must take at most 1.2 x
    ``weight_stats(folder)``, reading the same bytes, with equal values; and
    the reading alone (``open_source`` + every matrix's ``read()``), which
    isolates what HTTP adds from the statistics' time.

Each writes ``benchmarks/results/remote_<name>.json`` (:class:`_harness.Results`:
date, machine, load average, command, wall time, figures), which
``benchmarks/publish.py`` renders into the README. Needs nginx (``make server-deps``).

    .venv/bin/python benchmarks/bench_remote.py deepseek
    .venv/bin/python benchmarks/bench_remote.py 7b --layers 28 --reps 3     # the full 7B; --layers 2 on a busy machine
    .venv/bin/python benchmarks/bench_remote.py 7b --layers 28 --reps 3 --read-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import _harness as H

sys.path.insert(0, str(H.ROOT / "tests"))
RESULTS = H.ROOT / "benchmarks" / "results"
REPO = "deepseek-ai/DeepSeek-V3"
COMMIT = "d5" * 20
SHARDS = 163
FP8_BLOCK = 128
QUANTIZATION = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


# ---------------------------------------------------------------- the DeepSeek-V3 checkpoint


def deepseek_config() -> dict:
    from transformers import DeepseekV3Config

    cfg = DeepseekV3Config().to_dict()
    cfg.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", torch_dtype="bfloat16",
               quantization_config=QUANTIZATION, num_nextn_predict_layers=1)
    return cfg


def deepseek_tensors(cfg: dict) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, safetensors dtype, shape)`` of every stored tensor, in the hub checkpoint's order."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]

    def linear(name, out, inp):  # an FP8 matrix and its 128x128 block scales
        scales = (-(-out // FP8_BLOCK), -(-inp // FP8_BLOCK))
        return [(name + ".weight", "F8_E4M3", (out, inp)), (name + ".weight_scale_inv", "F32", scales)]

    out = [("model.embed_tokens.weight", "BF16", (cfg["vocab_size"], h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", "BF16", (h,)), (p + "post_attention_layernorm.weight", "BF16", (h,))]
        out += linear(p + "self_attn.q_a_proj", cfg["q_lora_rank"], h)
        out += [(p + "self_attn.q_a_layernorm.weight", "BF16", (cfg["q_lora_rank"],))]
        out += linear(p + "self_attn.q_b_proj", heads * qk, cfg["q_lora_rank"])
        out += linear(p + "self_attn.kv_a_proj_with_mqa", cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h)
        out += [(p + "self_attn.kv_a_layernorm.weight", "BF16", (cfg["kv_lora_rank"],))]
        out += linear(p + "self_attn.kv_b_proj", heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
                      cfg["kv_lora_rank"])
        out += linear(p + "self_attn.o_proj", h, heads * cfg["v_head_dim"])
        if i < cfg["first_k_dense_replace"]:
            inter = cfg["intermediate_size"]
            out += linear(p + "mlp.gate_proj", inter, h) + linear(p + "mlp.up_proj", inter, h)
            out += linear(p + "mlp.down_proj", h, inter)
            continue
        moe = cfg["moe_intermediate_size"]
        out += [(p + "mlp.gate.weight", "BF16", (cfg["n_routed_experts"], h)),
                (p + "mlp.gate.e_score_correction_bias", "F32", (cfg["n_routed_experts"],))]
        for e in range(cfg["n_routed_experts"]):
            q = f"{p}mlp.experts.{e}."
            out += linear(q + "gate_proj", moe, h) + linear(q + "up_proj", moe, h) + linear(q + "down_proj", h, moe)
        shared = moe * cfg["n_shared_experts"]
        q = p + "mlp.shared_experts."
        out += linear(q + "gate_proj", shared, h) + linear(q + "up_proj", shared, h)
        out += linear(q + "down_proj", h, shared)
    out += [("model.norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (cfg["vocab_size"], h))]
    return out


_BYTES = {"BF16": 2, "F32": 4, "F8_E4M3": 1}


def write_deepseek(folder: Path) -> dict:
    """The sparse checkpoint: config, index, 163 shards (headers and routers written, the rest holes)."""
    import numpy as np

    cfg = deepseek_config()
    tensors = deepseek_tensors(cfg)
    sizes = [int(np.prod(s)) * _BYTES[d] for _, d, s in tensors]
    per_shard = sum(sizes) / SHARDS
    shards, filled = [[]], 0.0
    for t, n in zip(tensors, sizes, strict=True):
        if filled >= per_shard and len(shards) < SHARDS:
            shards.append([])
            filled = 0.0
        shards[-1].append((t, n))
        filled += n
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    weight_map, routers, headers = {}, 0, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):06d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for (name, dtype, shape), n in shard:
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        headers += 8 + len(raw)
        with open(folder / fname, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            start = 8 + len(raw)
            for (name, _dtype, shape), _ in shard:
                if name.endswith("mlp.gate.weight"):  # the routers: real bytes
                    values = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
                    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
                    fh.seek(start + header[name]["data_offsets"][0])
                    fh.write(bf16.tobytes())
                    routers += bf16.nbytes
            fh.truncate(start + offset)
    total = sum(sizes)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return {"shards": len(shards), "tensors": len(tensors), "apparent_bytes": total, "router_bytes": routers,
            "shard_header_bytes": headers,
            "index_bytes": (folder / "model.safetensors.index.json").stat().st_size,
            "config_bytes": (folder / "config.json").stat().st_size}


# ---------------------------------------------------------------- children


def child_weight_stats(location: str, components: list[str] | None) -> None:
    import numpy as np

    import toolkit
    from toolkit.sources.remote import transfer_stats

    H.set_threads(None)
    t0 = time.perf_counter()
    ds = toolkit.weight_stats(location, ["frobenius_norm", "spectral_norm", "stable_rank"], components=components,
                              cache=False, progress=False)
    seconds = time.perf_counter() - t0
    values = {name: np.asarray(ds[name].values, dtype=float).tolist() for name in ("frobenius_norm", "stable_rank")}
    H.emit(seconds=seconds, client=transfer_stats(), cells=int(np.isfinite(ds.frobenius_norm.values).sum()),
           values=values)


def child_read(location: str) -> None:
    """Only the reading: every component matrix's ``record.read()``, timed (no statistics)."""
    import toolkit
    from toolkit.sources.remote import transfer_stats

    H.set_threads(None)
    t0 = time.perf_counter()
    src = toolkit.open_source(location)
    opened = time.perf_counter() - t0
    nbytes = 0
    for rec in src.tensors():
        if rec.name.endswith("_proj.weight"):
            nbytes += rec.read().numel() * 2
    H.emit(seconds=time.perf_counter() - t0, open_s=opened, bytes=nbytes, client=transfer_stats())


def run_toolkit(location: str, components, env: dict) -> dict:
    argv = [sys.executable, __file__, "child", location] + (["--components", *components] if components else [])
    return H.run_child(argv, env={"PYTHONPATH": str(H.ROOT), **env})


# ---------------------------------------------------------------- drivers


def serve(root: Path, work: Path):
    from _http_server import Nginx

    return Nginx(root, work)


def bench_deepseek(args) -> dict:
    from _http_server import lay_out_repo

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-remote-"))
    folder = work / "DeepSeek-V3"
    t0 = time.perf_counter()
    facts = write_deepseek(folder)
    facts["write_s"] = time.perf_counter() - t0
    facts["disk_bytes"] = sum(f.stat().st_blocks * 512 for f in folder.iterdir())
    print(f"wrote {facts['shards']} shards, {facts['tensors']} tensors, {H.fmt_bytes(facts['apparent_bytes'])} "
          f"apparent, {H.fmt_bytes(facts['disk_bytes'])} on disk ({facts['write_s']:.0f} s)", flush=True)
    server = serve(work / "www", work / "nginx")
    server.serve(lay_out_repo(work / "www", REPO, folder, COMMIT, fake_sha=True))
    server.start()
    try:
        env = {"HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(work / "hf"), "TOOLKIT_CACHE_DIR": str(work / "tk")}
        mark = server.mark()
        remote = run_toolkit(REPO, ["mlp.router"], env)
        moved = server.bytes_sent(mark)
        requests = len(server.requests(mark))
        local = run_toolkit(str(folder), ["mlp.router"], env)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    allowance = facts["router_bytes"] + facts["shard_header_bytes"] + facts["index_bytes"] + facts["config_bytes"]
    ratio = moved / allowance
    same = remote["values"] == local["values"]
    print(H.table([[H.fmt_bytes(moved), H.fmt_bytes(allowance), f"{ratio:.3f}", H.verdict(ratio <= 1.05),
                    f"{remote['seconds']:.1f}", H.verdict(remote["seconds"] < 60), f"{local['seconds']:.1f}",
                    str(same)]],
                  ["moved (server)", "routers + headers", "ratio", "<= 1.05", "remote s", "< 60 s", "local s",
                   "equal values"]))
    return {"checkpoint": facts, "moved_bytes_server": moved, "requests": requests,
            "moved_bytes_client": remote["client"]["bytes"], "allowance_bytes": allowance, "ratio": ratio,
            "ratio_ok": ratio <= 1.05, "remote_s": remote["seconds"], "remote_process_s": remote["process_s"],
            "time_ok": remote["seconds"] < 60, "local_s": local["seconds"], "cells": remote["cells"],
            "values_equal_local": same}


def bench_7b(args) -> dict:
    import _scale_7b

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-remote-7b-"))
    folder = work / "www" / "qwen7b"
    _scale_7b.generate(folder, args.layers)
    server = serve(work / "www", work / "nginx").start()
    rows = []
    try:
        env = {"TOOLKIT_CACHE_DIR": str(work / "tk")}
        url = f"{server.url}/qwen7b/"
        for rep in range(args.reps):
            skip = {"seconds": float("nan"), "values": None}
            local = skip if args.read_only else run_toolkit(str(folder), None, env)
            mark = server.mark()
            remote = skip if args.read_only else run_toolkit(url, None, env)
            read_local = H.run_child([sys.executable, __file__, "read", str(folder)], env={"PYTHONPATH": str(H.ROOT)})
            if args.read_only:
                mark = server.mark()
            read_remote = H.run_child([sys.executable, __file__, "read", url], env={"PYTHONPATH": str(H.ROOT)})
            moved = server.bytes_sent(mark, ".safetensors")  # weight_stats' bytes, or the reading's (read-only)
            rows.append({"rep": rep, "local_s": local["seconds"], "remote_s": remote["seconds"],
                         "read_local_s": read_local["seconds"], "read_remote_s": read_remote["seconds"],
                         "read_bytes": read_remote["bytes"], "moved_bytes_server": moved,
                         "values_equal_local": remote["values"] == local["values"], "load": H.load()})
            print(rows[-1], flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    local_s = sorted(r["local_s"] for r in rows)[len(rows) // 2]
    remote_s = sorted(r["remote_s"] for r in rows)[len(rows) // 2]
    ratio = remote_s / local_s
    read_local = sorted(r["read_local_s"] for r in rows)[len(rows) // 2]
    read_remote = sorted(r["read_remote_s"] for r in rows)[len(rows) // 2]
    print(H.table([["weight_stats", str(args.layers), f"{local_s:.1f}", f"{remote_s:.1f}", f"{ratio:.2f}",
                    H.verdict(ratio <= 1.2)],
                   ["reading only", str(args.layers), f"{read_local:.2f}", f"{read_remote:.2f}",
                    f"{read_remote / read_local:.2f}", ""]],
                  ["what", "layers", "local s (median)", "loopback HTTP s (median)", "ratio", "<= 1.2"]))
    return {"layers": args.layers, "reps": args.reps, "runs": rows, "local_s": local_s, "remote_s": remote_s,
            "ratio": ratio, "ratio_ok": ratio <= 1.2, "read_local_s": read_local, "read_remote_s": read_remote,
            "read_ratio": read_remote / read_local,
            "values_equal_local": all(r["values_equal_local"] for r in rows)}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "read":
        child_read(sys.argv[2])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        p = argparse.ArgumentParser()
        p.add_argument("child")
        p.add_argument("location")
        p.add_argument("--components", nargs="+", default=None)
        a = p.parse_args()
        child_weight_stats(a.location, a.components)
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=["deepseek", "7b"])
    p.add_argument("--layers", type=int, default=28, help="7b: layers of Qwen2.5-7B's shapes (default 28, all)")
    p.add_argument("--reps", type=int, default=1, help="7b: runs of each mode (the median is reported)")
    p.add_argument("--workdir", default=None, help="where the checkpoint is written (default: a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the checkpoint and the server's log")
    p.add_argument("--read-only", action="store_true", help="7b: time the reading only, not weight_stats")
    args = p.parse_args()
    print(H.machine(), "|", H.load(), flush=True)
    results = H.Results("remote_" + args.bench + ("_read" if args.read_only else ""))
    figures = bench_deepseek(args) if args.bench == "deepseek" else bench_7b(args)
    results.save(figures)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
