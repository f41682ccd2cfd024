"""``toolkit.watch`` against a bare training run: the wall-clock overhead of watching the CPU fine-tune.

The embedded SmolLM2-135M is fine-tuned (AdamW, the batches of ``toolkit.finetune``'s ``short`` preset
sizes, fixed windows of ``data/finetune.txt``) for ``--steps`` optimizer steps, three ways, interleaved
round by round (the weights and the optimizer reset before each run) so that a change of load hits all
of them alike:

- ``bare``: the training loop alone;
- ``default``: watched with the default metrics (``toolkit.watch(model)``: Frobenius norm and RMS, the
  update since the first and the previous record) at the default cadence (every 10 steps);
- ``alpha``: the same plus ``alpha`` every 50 steps (``spectral_every=50``).

Each watched run ends with ``monitor.wait()`` inside the clock (the records it took are measured).
Targets (the watch issue): ``default`` at most 1.05x ``bare``, ``alpha`` at most 1.15x, default threads.
The ratio of a round is its watched run's time over the same round's bare run (the runs of one round share
the machine's state: on a 2-core VM the bare run's time varied by 16 % between rounds); the figure is the
median of the rounds' ratios. Beside it, what the monitor counted: the training thread's seconds in
``monitor.step`` (the copies and the first record) and the background worker's CPU seconds.

Usage::

    .venv/bin/python benchmarks/bench_watch.py [--steps 100] [--reps 3] [--threads N]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

TARGETS = {"default": 1.05, "alpha": 1.15}
RUNS = {"bare": None, "default": {}, "alpha": {"metrics": ["frobenius_norm", "rms", "alpha"], "spectral_every": 50}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2)
    args = ap.parse_args(argv)
    rec = H.Results("watch")
    print(f"machine: {H.machine()}\n{H.load()} at start")
    H.set_threads(args.threads)

    import torch

    import toolkit
    from toolkit.data import data_path
    from toolkit.finetune.model import load_causal_lm, tokenize

    model, tokenizer = load_causal_lm()
    model.train()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ids = tokenize(data_path("finetune.txt").read_text(encoding="utf-8"), tokenizer, model.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, ids.numel() - args.seq_len, (args.steps, args.batch_size), generator=gen)
    batches = [torch.stack([ids[s: s + args.seq_len] for s in row.tolist()]) for row in starts]

    def train(options):
        gc.collect()  # a finished monitor's snapshot sets (a reference cycle) go before the clock starts
        model.load_state_dict(initial)
        opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0)
        t0 = time.perf_counter()
        monitor = toolkit.watch(model, **options) if options is not None else None
        if monitor is not None:
            monitor.step(0)
        for step, batch in enumerate(batches, start=1):
            model(input_ids=batch, labels=batch).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if monitor is not None:
                monitor.step(step)
        if monitor is not None:
            monitor.wait()
            monitor.close()
        seconds = time.perf_counter() - t0
        if monitor is None:
            return seconds, 0, 0, (0.0, 0.0)
        return (seconds, len(monitor.dataset.step), len(monitor.skipped),
                (monitor.training_thread_s, monitor.worker_cpu_s))

    train(None)  # warm-up: first-call costs (kernels, allocator) off the clock
    seconds: dict[str, list[float]] = {name: [] for name in RUNS}
    records: dict[str, list[int]] = {name: [] for name in RUNS}
    skipped: dict[str, list[int]] = {name: [] for name in RUNS}
    costs: dict[str, list[list[float]]] = {name: [] for name in RUNS}
    for _ in range(args.reps):
        for name, options in RUNS.items():
            s, n, k, cost = train(options)
            seconds[name].append(s)
            records[name].append(n)
            skipped[name].append(k)
            costs[name].append(list(cost))
            print(f"  {name}: {s:.1f} s, {n} records, {k} skipped, training thread {cost[0]:.2f} s, "
                  f"worker {cost[1]:.2f} s CPU", flush=True)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    round_ratios = {name: [w / b for w, b in zip(seconds[name], seconds["bare"], strict=True)] for name in TARGETS}
    ratios = {name: statistics.median(r) for name, r in round_ratios.items()}
    cost_median = {name: [statistics.median(c[i] for c in costs[name]) for i in range(2)] for name in TARGETS}
    rows = [[name, f"{median[name]:.1f} s", f"{min(s):.1f}-{max(s):.1f} s",
             (f"{ratios[name]:.3f}x ({min(round_ratios[name]):.3f}-{max(round_ratios[name]):.3f})"
              if name in ratios else ""), f"<= {TARGETS[name]}x" if name in TARGETS else "",
             H.verdict(ratios[name] <= TARGETS[name]) if name in ratios else "",
             (f"{cost_median[name][0]:.2f} s / {cost_median[name][1]:.2f} s" if name in TARGETS else ""),
             str(max(skipped[name]))]
            for name, s in seconds.items()]
    print(H.table(rows, ["run", "median", "range", "ratio to the round's bare (range)", "target", "",
                         "training thread / worker CPU", "skipped"]))
    print(f"{H.load()} at end")
    rec.save({"steps": args.steps, "seq_len": args.seq_len, "batch_size": args.batch_size, "reps": args.reps,
              "threads": args.threads or "all cores", "seconds": seconds, "median_s": median, "ratios": ratios,
              "round_ratios": round_ratios, "costs": costs, "cost_median_s": cost_median,
              "records": records, "skipped": skipped,
              "targets": {k: {"at_most": t, "ok": ratios[k] <= t} for k, t in TARGETS.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
