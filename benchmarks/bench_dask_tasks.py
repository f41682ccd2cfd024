"""Per-task cost of the Dask path (``client=``), for docs/scaling.md.

Writes (untimed) one transformer block with Llama-2-7B's shapes (hidden 4096,
intermediate 11008, 32 heads, no GQA; bf16 safetensors; a tiny vocabulary so
the embeddings do not count) twice: a base and a "fine-tune" with every entry
moved. Then measures, single-threaded as a Dask worker runs
(``torch.set_num_threads(1)``; the nanny sets ``OMP_NUM_THREADS=1``):

  read      ``TensorRecord.read`` + float32 conversion, file pages evicted
            first (``posix_fadvise DONTNEED``: a cold read from this disk) and
            again warm (page cache)
  weights   :func:`toolkit.collect.execute.remote.measure_task` of a weight unit, every
            weight metric, cache off: one task = one stored tensor
  compare_entrywise  the same task for a tensor pair, the entry-wise
            diff metrics (relative change, update sparsity/density, cosine)
  compare   the same task with every diff metric (``--skip-compare`` leaves it out)
  overhead  round trip of a no-op task through a 2-worker LocalCluster
  cluster   ``weight_stats(client=LocalCluster(2 workers))`` on the block, wall
            time against the sum of its tasks' compute times

Wall and CPU (``process_time``) seconds are both reported: on a shared, busy
machine the CPU time is the steadier figure.

Usage::

    .venv/bin/python benchmarks/bench_dask_tasks.py [--keep DIR] [--out results.json] [--skip-compare]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

# As on a Dask worker (the nanny sets OMP_NUM_THREADS=1): one thread for every
# pool, set before NumPy's and torch's BLAS load.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

ENTRYWISE_DIFF = ["relative_change", "update_sparsity", "update_density", "cosine_similarity"]
SHAPES = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32,
              num_hidden_layers=1, vocab_size=256, max_position_embeddings=256, tie_word_embeddings=False)


def write_block(folder: Path, seed: int, shift: float = 0.0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    if (folder / "model.safetensors").exists():
        return folder
    torch.manual_seed(seed)
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**SHAPES))
    model = model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02 + shift)
    model.to(torch.bfloat16).save_pretrained(folder)
    return folder


def evict(path: Path) -> None:
    for f in path.glob("*.safetensors"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(fn, *args):
    """``fn(*args)``, its wall and CPU seconds."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def read_float32(record) -> torch.Tensor:
    return record.read().to(torch.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-compare", action="store_true")
    args = ap.parse_args()
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness as H

    rec = H.Results("dask_tasks")
    os.environ["TOOLKIT_CACHE_DIR"] = "off"
    torch.set_num_threads(1)
    from toolkit.collect.cache import open_cache
    from toolkit.collect.execute.remote import SourceSpec, measure_task
    from toolkit.collect.measure.pairs import PairMeasurement
    from toolkit.collect.measure.weights import WeightMeasurement
    from toolkit.collect.plan import plan_pieces
    from toolkit.collect.plan.pairs import pair_tensors

    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-dask-"))
    base, tuned = write_block(root / "base", 0), write_block(root / "tuned", 1)
    plan = plan_pieces(base)
    spec = SourceSpec.of(plan.source)
    weights = WeightMeasurement.make(None)
    off = open_cache("bench", enabled=False)
    res: dict = {"load_avg_start": os.getloadavg(), "threads": torch.get_num_threads(), "tensors": []}
    for planned in plan.tensors:
        record = planned.record
        row = {"name": record.name, "shape": list(record.shape), "bytes_bf16": 2 * record.shape[0] * record.shape[1]}
        evict(base)
        _, row["read_cold_s"], _ = timed(read_float32, record)
        _, row["read_warm_s"], _ = timed(read_float32, record)
        work = weights.lookup(off, planned).detached()
        _, row["weights_wall_s"], row["weights_cpu_s"] = timed(measure_task, weights, work, (spec,))
        res["tensors"].append(row)
        print(json.dumps(row), flush=True)
    tplan = plan_pieces(tuned)
    tspec = SourceSpec.of(tplan.source)
    pairs = {tp.name: tp for tp in pair_tensors(plan, tplan)[0]}
    modes = [("compare_entrywise", ENTRYWISE_DIFF)] + ([] if args.skip_compare else [("compare", None)])
    for label, metrics in modes:
        pairm = PairMeasurement.make(metrics, 0.0, 16, "cpu")
        for row, planned in zip(res["tensors"], plan.tensors, strict=True):
            work = pairm.lookup(off, pairs[planned.record.name]).detached()
            _, row[f"{label}_wall_s"], row[f"{label}_cpu_s"] = timed(measure_task, pairm, work, (spec, tspec))
            print(json.dumps(row), flush=True)
    res.update(cluster(base))
    res["load_avg_end"] = os.getloadavg()
    print(json.dumps({k: v for k, v in res.items() if k != "tensors"}, indent=1))
    rec.save(res)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


def _noop(i):
    return i


def cluster(base: Path) -> dict:
    from distributed import Client, LocalCluster, get_task_stream

    import toolkit

    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as c:
        c.run(lambda: __import__("toolkit.collect.execute.remote") and None)  # imports off the clock
        for n in (200, 2000):
            t = time.perf_counter()
            c.gather(c.map(_noop, range(n), pure=False))
            out[f"noop_{n}_tasks_s"] = time.perf_counter() - t
        with get_task_stream(c) as ts:
            _, wall, _ = timed(lambda: toolkit.weight_stats(base, client=c, progress=False, cache=False))
        compute = [sum(e - s for a, s, e in [(x["action"], x["start"], x["stop"]) for x in t["startstops"]]
                       if a == "compute") for t in ts.data]
        out.update(cluster_wall_s=wall, cluster_tasks=len(compute), cluster_task_compute_s=sorted(compute))
    return out


if __name__ == "__main__":
    main()
