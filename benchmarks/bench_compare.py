"""``toolkit.compare`` on a Qwen2.5-7B-shaped fine-tune against its floors and against modeldelta 0.4.4 (issue 38).

The pair: ``--layers`` (default 1) layers of Qwen2.5-7B's shapes (q, o 3584 x 3584; k, v 512 x 3584; up,
gate 18944 x 3584; down 3584 x 18944; biases and norms), bf16, one safetensors file a side, generated
untimed (kept with ``--keep DIR``). Each base matrix is 0.02 x Gaussian noise plus 64 rank-one spikes above
the noise's Marchenko-Pastur edge (sigma_i = edge (1 + 4 i^-1/2)), the heavy tail of trained weights;
a pure Gaussian matrix's top singular values are clustered at the edge, where ``subspace_overlap``'s
Krylov route cannot certify its subspace and takes the exact route. The tuned side moves 10 % of the
entries by N(0, 1e-3) (bf16-rounded; some round back to the base value).

Runs, each a fresh process with the cache off and ``--threads`` threads (default 0: the default count, as a
user runs it), interleaved rep by rep:

  compare       ``toolkit.compare(base, tuned)``, every default diff metric
  metric:NAME   ``compare(..., metrics=[NAME])`` for each default diff metric (``--metric-reps``)
  entrywise     ``compare(..., metrics=[relative_change, update_sparsity, update_density, cosine_similarity])``
  floor         for each component matrix, ΔW formed untimed in float64, its Gram matrix (BLAS syrk) and
                ``eigvalsh``, timed: what the spectral diff metrics cannot avoid
  read          a plain read of both files, every tensor, and the count of equal entries of each pair
  modeldelta    ``modeldelta base tuned -o out.json`` (0.4.4, its own venv ``benchmarks/.md-venv``:
                ``python3 -m venv``, the project's site-packages by a ``.pth`` for torch, then
                ``pip install --no-deps modeldelta==0.4.4``; the reference, never a dependency)

Agreement: relative change, cosine and sparsity of each matrix from modeldelta's JSON against
``compare(..., tolerance=1e-5)`` (modeldelta counts |Δ| < 1e-5 as unchanged; no bf16 difference equals 1e-5).

Targets (issue 38): each default diff metric <= 1.25x floor; entrywise <= 2x read; compare >= 2x faster
than modeldelta with less peak RSS; compare's peak RSS < 1.5 GB and <= half modeldelta's.

Usage::

    .venv/bin/python benchmarks/bench_compare.py [--reps 3] [--metric-reps 1] [--md-reps 1] [--layers 1]
        [--keep DIR] [--remote]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _harness as H
import _scale_7b as S

HERE = Path(__file__).resolve().parent
MD_PY = HERE / ".md-venv" / "bin" / "python"
ENTRYWISE = ["relative_change", "update_sparsity", "update_density", "cosine_similarity"]
MD_TOLERANCE = 1e-5
SELECT = {"attn.q": "self_attn.q_proj.weight", "mlp.down": "mlp.down_proj.weight"}  # --remote's selection
TARGETS = {"metric_over_floor": 1.25, "entrywise_over_read": 2.0, "md_over_compare": 2.0, "rss_bytes": 1.5e9,
           "rss_share_of_md": 0.5}


# ---------------------------------------------------------------- children


def child_generate(folder: Path, layers: int, base: str) -> None:
    import torch
    from safetensors.torch import save_file

    H.set_threads(None)
    g = torch.Generator().manual_seed(0)
    cfg = S.config(layers)
    sides = {"base": {}, "tuned": {}}
    for i in range(layers):
        for name, shape in S.layer_shapes(cfg, i):
            if name.endswith("norm.weight"):
                b = torch.ones(shape)
            elif len(shape) == 1:
                b = torch.randn(shape, generator=g) * 0.02
            else:
                b = spiked(shape, g) if base == "spiked" else torch.randn(shape, generator=g) * 0.02
            b = b.to(torch.bfloat16)
            move = (torch.rand(shape, generator=g) < 0.1) * torch.randn(shape, generator=g) * 1e-3
            sides["base"][name], sides["tuned"][name] = b, (b.float() + move).to(torch.bfloat16)
    for side, tensors in sides.items():
        (folder / side).mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / side / "model.safetensors"), metadata={"format": "pt"})
        (folder / side / "config.json").write_text(json.dumps(cfg, indent=2))
    H.emit(tensors=len(sides["base"]))


def spiked(shape, g, spikes: int = 64):
    """0.02 x Gaussian noise plus ``spikes`` rank-one terms above its edge 0.02 (sqrt(m) + sqrt(n))."""
    import torch

    m, n = shape
    edge = 0.02 * (m ** 0.5 + n ** 0.5)
    s = edge * (1 + 4 * torch.arange(1, spikes + 1, dtype=torch.float32) ** -0.5)
    u = torch.randn(m, spikes, generator=g) / m ** 0.5
    v = torch.randn(n, spikes, generator=g) / n ** 0.5
    return torch.randn(shape, generator=g) * 0.02 + (u * s) @ v.T


def child_compare(folder: Path, metrics: str, threads: int, tolerance: float, where: str | None = None,
                  select: bool = False) -> None:
    """``compare`` of ``folder``'s pair, or of the same pair served at ``where`` (``{where}/base/``, ...)."""
    import xarray as xr

    import toolkit

    toolkit.open_source(str(folder / "base"))  # one-time imports, untimed
    xr.Dataset({"x": ("a", [1.0])})
    H.set_threads(threads)
    rss_before = H.peak_rss_bytes()  # what the imports hold before any tensor is read
    chosen = None if metrics == "default" else ENTRYWISE if metrics == "entrywise" else metrics.split(",")
    t0 = time.perf_counter()
    base, tuned = (f"{where}/base/", f"{where}/tuned/") if where else (str(folder / "base"), str(folder / "tuned"))
    ds = toolkit.compare(base, tuned, chosen, tolerance=tolerance, progress=False, cache=False,
                         **({"layers": [0], "components": list(SELECT)} if select else {}))
    seconds = time.perf_counter() - t0
    values = {}
    for v in ds.data_vars:
        if ds[v].dims == ("layer", "component"):
            values[v] = {str(p): float(x) for p, x in zip(ds.parameter_name.values.ravel(), ds[v].values.ravel(),
                                                          strict=True) if p}
    H.emit(seconds=seconds, values=values, rss_before=rss_before)


def child_floor(folder: Path, threads: int) -> None:
    import numpy as np
    import torch
    from safetensors import safe_open
    from threadpoolctl import threadpool_limits

    H.set_threads(threads)
    total = 0.0
    with safe_open(str(folder / "base" / "model.safetensors"), "pt") as fb, \
            safe_open(str(folder / "tuned" / "model.safetensors"), "pt") as ft, \
            threadpool_limits(limits=threads or None, user_api="blas"):
        for name in sorted(n for n in fb.keys() if n.endswith("_proj.weight")):
            d = (ft.get_tensor(name).to(torch.float64) - fb.get_tensor(name).to(torch.float64)).numpy()
            t0 = time.perf_counter()
            gram = d @ d.T if d.shape[0] <= d.shape[1] else d.T @ d
            torch.linalg.eigvalsh(torch.from_numpy(np.ascontiguousarray(gram)))
            total += time.perf_counter() - t0
            del d, gram
    H.emit(seconds=total)


def child_read(folder: Path, threads: int) -> None:
    from safetensors import safe_open

    H.set_threads(threads)
    t0 = time.perf_counter()
    with safe_open(str(folder / "base" / "model.safetensors"), "pt") as fb, \
            safe_open(str(folder / "tuned" / "model.safetensors"), "pt") as ft:
        # every entry compared (torch.equal stops at the first difference, and safetensors maps the file
        # without reading it: the count reads both tensors whole)
        same = sum(int((fb.get_tensor(n) == ft.get_tensor(n)).sum()) for n in fb.keys())
    H.emit(seconds=time.perf_counter() - t0, unchanged_entries=same)


def child_modeldelta(folder: Path, out: str) -> None:
    """Inside benchmarks/.md-venv: modeldelta's command line, in process (its own peak RSS)."""
    from modeldelta.cli import compare

    t0 = time.perf_counter()
    compare.main([str(folder / "base"), str(folder / "tuned"), "-o", out, "-q"], standalone_mode=False)
    seconds = time.perf_counter() - t0
    modules = json.loads(Path(out).read_text())["modules"]
    H.emit(seconds=seconds, values={m["name"]: {"relative_change": m["frob_norm_relative"],
                                                 "cosine_similarity": m["cosine_sim"],
                                                 "update_sparsity": m["sparsity"]} for m in modules})


# ---------------------------------------------------------------- driver


def run(kind: str, folder: Path, threads: int, *extra: str, python: str | None = None) -> dict:
    argv = [python or sys.executable, __file__, "--child", kind, "--folder", str(folder), "--threads",
            str(threads), *extra]
    env = {**H.thread_env(threads), "PYTHONPATH": str(H.ROOT)}  # this checkout's toolkit, whatever is installed
    r = H.run_child(argv, env=env, cwd=str(HERE))
    r["load"] = H.load()
    print(f"  {kind} {' '.join(extra)}: {r['seconds']:.2f} s, peak RSS {H.fmt_bytes(r['peak_rss'])} ({r['load']})",
          flush=True)
    return r


def remote(folder: Path, args) -> dict:
    """The selection (:data:`SELECT`, layer 0) compared over loopback HTTP (nginx over ``folder``) and locally:
    bytes nginx sent for the safetensors files against the selected pairs' bytes and the headers."""
    sys.path.insert(0, str(H.ROOT / "tests"))
    from _http_server import Nginx
    from toolkit.sources.safetensors_ import read_header

    headers = selected = 0
    for side in ("base", "tuned"):
        f = folder / side / "model.safetensors"
        with open(f, "rb") as fh:
            headers += 8 + int.from_bytes(fh.read(8), "little")
        selected += sum(e.nbytes for n, e in read_header(f).items() if n.endswith(tuple(SELECT.values())))
    with tempfile.TemporaryDirectory() as work:
        server = Nginx(folder, Path(work)).start()
        try:
            mark = server.mark()
            over = run("compare", folder, args.threads, "--where", server.url, "--select", "--metrics", "entrywise")
            moved = server.bytes_sent(mark, ".safetensors")
        finally:
            server.stop()
    local = run("compare", folder, args.threads, "--select", "--metrics", "entrywise")
    return {"selection": list(SELECT), "layers": [0], "selected_bytes": selected, "header_bytes": headers,
            "moved_bytes": moved, "ratio": moved / selected, "ratio_with_headers": moved / (selected + headers),
            "remote_s": over["seconds"], "local_s": local["seconds"], "values_equal_local": over["values"] ==
            local["values"], "target": 1.05}


def agreement(md: dict, tk: dict) -> dict:
    """Largest difference between modeldelta's and the toolkit's values of each entry-wise metric."""
    out = {}
    for metric in ("relative_change", "cosine_similarity", "update_sparsity"):
        devs = [abs(md[name][metric] - v) for name, v in tk[metric].items() if name in md]
        scale = [abs(v) for name, v in tk[metric].items() if name in md]
        out[metric] = {"matrices": len(devs), "max_abs_dev": max(devs), "max_rel_dev": max(
            d / s for d, s in zip(devs, scale, strict=True) if s)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--metric-reps", type=int, default=1, help="repetitions of each single-metric run")
    ap.add_argument("--md-reps", type=int, default=1, help="repetitions of modeldelta (minutes a run on one thread)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="threads of each run (0: the default count)")
    ap.add_argument("--base", choices=("spiked", "gaussian"), default="spiked",
                    help="the base matrices: Gaussian noise plus spikes, or plain Gaussian noise")
    ap.add_argument("--keep", help="folder for the generated pair (kept; reused when there)")
    ap.add_argument("--no-modeldelta", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--folder")
    ap.add_argument("--metrics", default="default")
    ap.add_argument("--tolerance", type=float, default=0.0)
    ap.add_argument("--out")
    ap.add_argument("--where")
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--remote", action="store_true", help="only the loopback-HTTP run (results compare_remote.json)")
    args = ap.parse_args(argv)
    if args.child:
        folder = Path(args.folder)
        {"generate": lambda: child_generate(folder, args.layers, args.base),
         "compare": lambda: child_compare(folder, args.metrics, args.threads, args.tolerance, args.where,
                                          args.select),
         "floor": lambda: child_floor(folder, args.threads), "read": lambda: child_read(folder, args.threads),
         "modeldelta": lambda: child_modeldelta(folder, args.out)}[args.child]()
        return 0
    results = H.Results("compare_remote" if args.remote else f"compare_7b_{args.base}")
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench_compare_"))
    if not (folder / "tuned" / "model.safetensors").exists():
        print(f"generating {args.layers} layer(s) into {folder} ...", flush=True)
        H.run_child([sys.executable, __file__, "--child", "generate", "--folder", str(folder), "--layers",
                     str(args.layers), "--base", args.base])
    if args.remote:
        results.save(remote(folder, args))
        return 0
    from toolkit.metrics.registry import list_metrics

    metrics = list_metrics("diff")
    md = not args.no_modeldelta and MD_PY.is_file()
    runs: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            print(f"rep {rep + 1}/{args.reps}", flush=True)
            plan = [("floor", ()), ("read", ()), ("compare", ()), ("entrywise", ("--metrics", "entrywise"))]
            if md and rep < args.md_reps:
                plan.append(("modeldelta", ("--out", f"{tmp}/md.json")))
            if rep < args.metric_reps:
                plan += [(f"metric:{m}", ("--metrics", m)) for m in metrics]
            for key, extra in plan:
                kind = "compare" if key == "entrywise" or key.startswith("metric:") else key
                runs.setdefault(key, []).append(run(kind, folder, args.threads, *extra,
                                                    python=str(MD_PY) if kind == "modeldelta" else None))
        check = run("compare", folder, args.threads, "--metrics", "entrywise", "--tolerance", str(MD_TOLERANCE))
    med = {k: statistics.median(r["seconds"] for r in rs) for k, rs in runs.items()}
    rss = {k: max(r["peak_rss"] for r in rs) for k, rs in runs.items()}
    figures = {"base": args.base, "layers": args.layers, "reps": args.reps, "metric_reps": args.metric_reps,
               "md_reps": args.md_reps,
               "threads": args.threads,
               "seconds": {k: [r["seconds"] for r in rs] for k, rs in runs.items()}, "median_s": med,
               "peak_rss": rss, "loads": {k: [r["load"] for r in rs] for k, rs in runs.items()},
               "targets": TARGETS,
               "metric_over_floor": {m: med[f"metric:{m}"] / med["floor"] for m in metrics},
               "compare_over_floor": med["compare"] / med["floor"],
               "entrywise_over_read": med["entrywise"] / med["read"],
               "rss_imports": max(r["rss_before"] for r in runs["compare"])}
    if md:
        figures["md_over_compare"] = med["modeldelta"] / med["compare"]
        figures["rss_share_of_md"] = rss["compare"] / rss["modeldelta"]
        figures["agreement"] = agreement(runs["modeldelta"][0]["values"], check["values"])
    results.save(figures)
    for k, v in figures.items():
        if k not in ("seconds", "loads"):
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
