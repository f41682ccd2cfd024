"""Benchmark 2: 28 layers at real width, against the I/O floor.

Generates (untimed) a random-weight checkpoint with Qwen2.5-1.5B's shapes
(28 layers, hidden 1536, intermediate 8960, 12 heads, 2 key-value heads,
vocabulary 151936, tied embeddings, q/k/v biases) as bf16 safetensors in
1 GiB shards, plus a "fine-tune" of it (a third of the entries changed), and
times, each in a fresh process, with the result cache off:

  floor     every component tensor read to float32 with safetensors alone
  norms     toolkit.weight_stats with the entry-wise metrics (no spectrum)
  all       toolkit.weight_stats with every metric
  compare   toolkit.compare(base, finetune) with the entry-wise diff metrics,
            against twice the floor
  compare-all  compare with every diff metric (informational, not run by
            default: it factorises three matrices per cell)

Each figure is the median over ``--reps`` runs (``--heavy-reps`` for the
untargeted 'all' and 'compare-all', default 1); peak RSS is the child's
VmHWM, against the largest component tensor in float32 (8960 x 1536: 52.5 MiB).

Usage::

    .venv/bin/python benchmarks/bench_scale.py [--reps 3] [--device cpu|cuda]
        [--keep DIR] [--modes floor,norms,compare,all[,compare-all]] [--heavy-reps 1]
        [--precision float64|float32]

``--shapes 7b`` runs the Qwen2.5-7B-shapes mode instead (see
``benchmarks/_scale_7b.py``: all metrics against the linear-algebra floor, the
float32 mode, WeightWatcher)::

    .venv/bin/python benchmarks/bench_scale.py --shapes 7b --layers 2 [--ww-layers 1]
        [--modes floor,floor32,all,all32,ww] [--keep DIR]

``--keep DIR`` generates the checkpoints into DIR once and reuses them
(default: a temporary folder, deleted at the end).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402
import _scale_7b as S7  # noqa: E402

QWEN25_15B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}
SHARD_BYTES = 1 << 30
ENTRYWISE = ["frobenius_norm", "rms", "kurtosis", "max_abs_over_rms"]
ENTRYWISE_DIFF = ["relative_change", "update_sparsity", "update_density", "cosine_similarity"]
LARGEST_F32 = 8960 * 1536 * 4
MODES = ["floor", "norms", "all", "compare", "compare-all"]
DEFAULT_MODES = "floor,norms,compare,all"
HEAVY = {"all", "compare-all"}  # minutes per run, no time target: --heavy-reps runs


def shapes(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Parameter names and shapes of a Qwen2 checkpoint, in file order (each layer's from ``_scale_7b``)."""
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], cfg["hidden_size"]))]
    for i in range(cfg["num_hidden_layers"]):
        out += S7.layer_shapes(cfg, i)
    out.append(("model.norm.weight", (cfg["hidden_size"],)))
    return out


def is_component(name: str) -> bool:
    return name.endswith("_proj.weight")


# ---------------------------------------------------------------- children


def child_generate(folder: Path) -> None:
    """Write the base checkpoint to folder/base and its fine-tune to folder/finetune."""
    import torch
    from safetensors.torch import save_file

    H.set_threads(None)
    g = torch.Generator().manual_seed(0)
    spec = shapes(QWEN25_15B)
    for side in ("base", "finetune"):
        (folder / side).mkdir(parents=True, exist_ok=True)
    plan, size, k = [], 0, 0
    for name, shape in spec:  # assign tensors to shards of at most SHARD_BYTES
        nbytes = 2 * int(torch.Size(shape).numel())
        if plan and size + nbytes > SHARD_BYTES:
            k, size = k + 1, 0
        plan.append((name, shape, k))
        size += nbytes
    n_shards = k + 1
    weight_map = {}
    for s in range(n_shards):
        tensors = {"base": {}, "finetune": {}}
        for name, shape, k in plan:
            if k != s:
                continue
            if name.endswith("norm.weight"):
                b = torch.ones(shape, dtype=torch.bfloat16)
            else:
                b = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
            t = b.clone()
            if b.ndim == 2:  # a fine-tune: a third of the entries moved by ~1e-3
                mask = torch.rand(shape, generator=g) < 1 / 3
                t[mask] = (t[mask].float() + 1e-3 * torch.randn(int(mask.sum()), generator=g)).to(torch.bfloat16)
            tensors["base"][name], tensors["finetune"][name] = b, t
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        for side in ("base", "finetune"):
            save_file(tensors[side], str(folder / side / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in tensors["base"]})
        del tensors
    total = sum(2 * int(torch.Size(sh).numel()) for _, sh in spec)
    for side in ("base", "finetune"):
        (folder / side / "config.json").write_text(json.dumps(QWEN25_15B, indent=2))
        (folder / side / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    H.emit(shards=n_shards, total_bytes=total)


def child_floor(folder: Path, threads: int | None) -> None:
    """Every component tensor to float32 with safetensors alone, shard by shard."""
    import torch
    from safetensors import safe_open

    H.set_threads(threads)
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    by_shard: dict[str, list[str]] = {}
    for name, f in weight_map.items():
        if is_component(name):
            by_shard.setdefault(f, []).append(name)
    t0 = time.perf_counter()
    n = 0
    for f, names in sorted(by_shard.items()):
        with safe_open(str(folder / f), framework="pt") as fh:
            for name in names:
                w = fh.get_tensor(name).to(torch.float32)
                n += w.numel()
                del w
    H.emit(seconds=time.perf_counter() - t0, elements=n)


def child_toolkit(mode: str, folder: Path, device: str, threads: int | None, precision: str = "float64") -> None:
    t0 = time.perf_counter()
    import toolkit  # the import a notebook has already done

    # Opening a source imports parts of transformers (config classes, renamings):
    # a one-time cost per session, paid here untimed, as the floor does not time
    # importing torch and safetensors. It is reported as import_s.
    toolkit.open_source(str(folder / "base"))
    import toolkit.collect.compare  # noqa: F401
    import_s = time.perf_counter() - t0
    H.set_threads(threads)
    t0 = time.perf_counter()
    if mode in ("norms", "all"):
        ds = toolkit.weight_stats(str(folder / "base"), ENTRYWISE if mode == "norms" else None,
                                  device=device, progress=False, cache=False, precision=precision)
    else:
        from toolkit.collect.compare import compare

        ds = compare(str(folder / "base"), str(folder / "finetune"),
                             ENTRYWISE_DIFF if mode == "compare" else None,
                             device=device, progress=False, cache=False)
    seconds = time.perf_counter() - t0
    first = next(iter(ds.data_vars))
    H.emit(seconds=seconds, import_s=import_s, cells=int(ds[first].notnull().sum()), vars=sorted(ds.data_vars))


# ---------------------------------------------------------------- driver


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per mode (median reported)")
    ap.add_argument("--device", default="cpu", help="device for the spectral work: cpu (default) or cuda")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--keep", type=Path, default=None, help="generate into / reuse this folder")
    ap.add_argument("--modes", default=DEFAULT_MODES, help=f"comma list of {MODES} (default {DEFAULT_MODES})")
    ap.add_argument("--heavy-reps", type=int, default=1, help="repetitions of 'all' and 'compare-all' (default 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    ap.add_argument("--precision", default="float64", choices=["float64", "float32"],
                    help="spectral precision of the 'all' mode (default float64)")
    ap.add_argument("--shapes", default="1.5b", choices=["1.5b", "7b"],
                    help="Qwen2.5-1.5B shapes (default) or the Qwen2.5-7B-shapes mode")
    ap.add_argument("--layers", type=int, default=28, help="7b: layers to generate and measure (default 28)")
    ap.add_argument("--ww-layers", type=int, default=1, help="7b: layers WeightWatcher analyses (default 1)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child and args.child.startswith("7b-"):
        return child_7b(args)
    if args.shapes == "7b":
        return main_7b(args)
    if args.child:
        if args.child == "generate":
            child_generate(args.dir)
        elif args.child == "floor":
            child_floor(args.dir / "base", args.threads)
        else:
            child_toolkit(args.child, args.dir, args.device, args.threads, args.precision)
        return 0

    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")
    if "floor" not in modes:
        modes.insert(0, "floor")
    rec = H.Results("scale_1.5b" + ("" if args.precision == "float64" else f"_{args.precision}")
                    + ("" if args.device == "cpu" else f"_{args.device}"))
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", **H.thread_env(args.threads)}
    common = ["--dir", str(folder), "--device", args.device, "--precision", args.precision]
    if args.threads:
        common += ["--threads", str(args.threads)]
    print(f"machine: {H.machine()}\n{H.load()} at start; device {args.device}; {args.reps} reps per mode")
    try:
        if not (folder / "finetune" / "model.safetensors.index.json").is_file():
            print(f"generating the checkpoints in {folder} (untimed) ...", flush=True)
            t0 = time.perf_counter()
            gen = H.run_child(me + ["--child", "generate"] + common, env=env)
            print(f"  {gen['shards']} shards, {H.fmt_bytes(gen['total_bytes'])} per checkpoint, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        # one untimed read of each checkpoint so every mode starts from the page cache
        for side in ("base", "finetune"):
            _warm(folder / side)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for rep in range(max(args.reps, args.heavy_reps)):  # interleaved: load changes hit every mode alike
            for m in modes:
                if rep >= (args.heavy_reps if m in HEAVY else args.reps):
                    continue
                r = H.run_child(me + ["--child", m] + common, env=env)
                runs[m].append(r)
                peak = H.fmt_bytes(r["peak_rss"])
                print(f"  rep {rep + 1} {m:12s} {r['seconds']:7.2f} s  peak RSS {peak}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)

    figures = report(runs, args)
    rec.save(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def child_7b(args) -> int:
    mode = args.child.removeprefix("7b-")
    if mode == "generate":
        S7.generate(args.dir, args.layers)
    elif mode in ("floor", "floor32"):
        S7.child_floor(args.dir, args.threads, "float64" if mode == "floor" else "float32")
    elif mode in ("all", "all32"):
        S7.child_toolkit(args.dir, args.device, args.threads, "float64" if mode == "all" else "float32")
    else:
        S7.child_ww(args.dir, args.device, args.threads, args.ww_layers)
    return 0


def main_7b(args) -> int:
    """The 7B-shapes mode: generate (untimed), run each mode in fresh processes, print the table."""
    from bench_weightwatcher import WW_PY, ensure_ww_venv

    modes = [m for m in (args.modes if args.modes != DEFAULT_MODES else ",".join(S7.MODES)).split(",") if m]
    unknown = set(modes) - set(S7.MODES)
    if unknown:
        raise SystemExit(f"unknown 7b modes {sorted(unknown)}; known: {S7.MODES}")
    rec = H.Results("scale_7b" + ("" if args.device == "cpu" else f"_{args.device}"))
    if "ww" in modes:
        ensure_ww_venv()
    folder = (args.keep or Path(tempfile.mkdtemp(prefix="bench-scale-7b-"))) / f"qwen25-7b-{args.layers}l"
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {"TOOLKIT_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1", **H.thread_env(args.threads)}
    common = ["--shapes", "7b", "--dir", str(folder), "--device", args.device, "--layers", str(args.layers),
              "--ww-layers", str(args.ww_layers)] + (["--threads", str(args.threads)] if args.threads else [])
    print(f"machine: {H.machine()}\n{H.load()} at start; device {args.device}; Qwen2.5-7B shapes, {args.layers} "
          f"layer(s); {args.reps} rep(s) per mode; WeightWatcher on {args.ww_layers} layer(s)")
    try:
        if not (folder / "model.safetensors.index.json").is_file():
            print(f"generating {folder} (untimed) ...", flush=True)
            t0 = time.perf_counter()
            gen = H.run_child(["nice", "-n", "10"] + me + ["--child", "7b-generate"] + common, env=env)
            print(f"  {H.fmt_bytes(gen['total_bytes'])}, {time.perf_counter() - t0:.0f} s", flush=True)
        _warm(folder)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for rep in range(args.reps):
            for m in modes:
                if m == "ww" and rep >= args.heavy_reps:
                    continue
                python = [str(WW_PY), me[1]] if m == "ww" else me
                r = H.run_child(python + ["--child", f"7b-{m}"] + common, env=env, timeout=4 * 3600)
                runs[m].append(r)
                print(f"  rep {rep + 1} {m:8s} {r['seconds']:8.1f} s  peak RSS {H.fmt_bytes(r['peak_rss'])}",
                      flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder.parent, ignore_errors=True)
    rows, misses, figures = S7.report(runs, args.layers, args.ww_layers)
    print()
    print(H.table(rows, ["mode", "median time", "per layer", "ratio", "target", "peak RSS", "RSS target"]))
    for line in S7.agreement(runs):
        print(line)
        if "MISS" in line:
            misses.append(line)
    if "ww" in runs and runs["ww"]:
        print(f"WeightWatcher's from_pretrained (untimed): {H.median_of(runs['ww'], 'load_s'):.1f} s")
    print(f"largest matrix in float64: {H.fmt_bytes(S7.LARGEST_F64)}; {H.load()} at end")
    print("all targets met: PASS" if not misses else "MISSED: " + "; ".join(misses))
    figures.update(machine=H.machine(), load_at_end=H.load(), misses=misses,
                   agreement=S7.agreement(runs), all_runs=runs)
    rec.save(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def _warm(folder: Path) -> None:
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def report(runs: dict, args) -> dict:
    floor = H.median_of(runs["floor"], "seconds")
    rss_limit = 2 * LARGEST_F32 + H.GIB
    rows, figures = [], {"machine": H.machine(), "load_at_end": H.load(), "device": args.device,
                         "reps": args.reps, "floor_s": floor, "modes": {}}
    targets = {"floor": None, "norms": ("floor", 1.0, 1.3), "all": None,
               "compare": ("2 x floor", 2.0, 1.5), "compare-all": None}
    misses = []
    for m, rs in runs.items():
        t = H.median_of(rs, "seconds")
        rss = max(r["peak_rss"] for r in rs)
        target = targets[m]
        if target is None:  # reported, not held to a limit
            target = ("2 x floor", 2.0, None) if m.startswith("compare") else ("floor", 1.0, None)
        ref_name, mult, limit = target
        ratio = t / (mult * floor)
        t_ok = None if limit is None else ratio <= limit
        rss_ok = None if m == "floor" else rss <= rss_limit  # the floor is the reference, not held to it
        if t_ok is False:
            misses.append(f"{m}: {ratio:.2f}x {ref_name}, target {limit}x ({(ratio / limit - 1) * 100:.0f}% over)")
        if rss_ok is False:
            misses.append(f"{m}: peak RSS {H.fmt_bytes(rss)} > {H.fmt_bytes(rss_limit)} "
                          f"({(rss / rss_limit - 1) * 100:.0f}% over)")
        rows.append([m, f"{t:.2f} s", f"{ratio:.2f}x {ref_name}",
                     "-" if limit is None else f"<= {limit}x {H.verdict(t_ok)}",
                     H.fmt_bytes(rss), f"{rss / LARGEST_F32:.1f}x",
                     "-" if rss_ok is None else f"<= {H.fmt_bytes(rss_limit)} {H.verdict(rss_ok)}"])
        figures["modes"][m] = {"seconds": t, "all_seconds": [r["seconds"] for r in rs], "ratio": ratio,
                               "reference": ref_name, "time_target": limit, "time_ok": t_ok,
                               "peak_rss": rss, "rss_ok": rss_ok}
    print()
    print(H.table(rows, ["mode", "median time", "ratio", "time target", "peak RSS",
                         "RSS / largest f32", "RSS target"]))
    print(f"largest component tensor in float32: {H.fmt_bytes(LARGEST_F32)}; {H.load()} at end")
    print("all targets met" if not misses else "MISSED: " + "; ".join(misses))
    figures["misses"] = misses
    return figures


if __name__ == "__main__":
    sys.exit(main())
