"""Per-task cost of DeepSeek-V3-sized matrices, for the MoE projection in docs/scaling.md.

Measures, single-threaded as a Dask worker runs (the nanny sets
``OMP_NUM_THREADS=1``), the compute of one ``weight_stats`` task on random
bf16 matrices with DeepSeek-V3's shapes (hidden 7168, expert intermediate
2048, 128 heads, ``q_lora_rank`` 1536, ``kv_lora_rank`` 512,
``qk_nope_head_dim`` 128, ``v_head_dim`` 128, dense intermediate 18432):

  expert     one routed (or shared) expert's gate / up (2048 x 7168); its
             down (7168 x 2048) has the same spectrum cost
  router     the router (256 x 7168)
  o_proj     attn.o (7168 x 16384), the largest attention matrix
  kv_b_half  attn.k or attn.v cut from kv_b_proj (16384 x 512)
  q_a, q_b, kv_a  attn.q_a (1536 x 7168), attn.q (24576 x 1536), attn.kv_a (576 x 7168)
  dense      the dense layers' gate / up (18432 x 7168)

with every default weight metric (``full``) and with the entry-wise ones only
(``entrywise``). CPU seconds (``process_time``) are reported with the wall
seconds: on a shared, busy machine the CPU time is the steadier figure.

Usage::

    .venv/bin/python benchmarks/bench_moe_tasks.py [--repeat 2] [--shapes expert,router] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

SHAPES = {"expert": (2048, 7168), "router": (256, 7168), "o_proj": (7168, 16384), "kv_b_half": (16384, 512),
          "q_a": (1536, 7168), "q_b": (24576, 1536), "kv_a": (576, 7168), "dense": (18432, 7168)}
ENTRYWISE = ["frobenius_norm", "rms", "kurtosis", "max_abs_over_rms"]


def timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _harness as H

    rec = H.Results("moe_tasks")
    torch.set_num_threads(1)
    from toolkit.metrics.evaluate import evaluate_matrix
    from toolkit.metrics.registry import resolve_metrics

    full, entry = resolve_metrics(None, kind="weight"), resolve_metrics(ENTRYWISE, kind="weight")
    rows = []
    g = torch.Generator().manual_seed(0)
    for name in args.shapes.split(","):
        for label, metrics in (("entrywise", entry), ("full", full)):
            for i in range(args.repeat):  # a fresh matrix each run: nothing memoised from the last one
                w = (torch.randn(SHAPES[name], generator=g) * 0.02).to(torch.bfloat16)
                wall, cpu = timed(evaluate_matrix, w, metrics)
                row = {"shape": name, "dims": SHAPES[name], "metrics": label, "run": i, "wall_s": wall, "cpu_s": cpu}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("load average:", os.getloadavg())
    rec.save({"repeat": args.repeat, "rows": rows})
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
