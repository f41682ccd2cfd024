"""``activation_stats`` against a bare forward pass of the same batches, side by side in one process.

The model (default: the embedded SmolLM2-135M) is loaded once; the packaged
prompts are tokenized and batched exactly as ``activation_stats`` batches
them. Four runs, interleaved round by round so that a change of load hits
all of them alike:

- ``forward``: the bare forward of every batch (``torch.no_grad``, the
  model's own attention implementation, logits computed, no hook): the floor
  of the activation statistics;
- ``statistics``: ``activation_stats(model, gradients=False, attention=False)``;
- ``forward, eager``: the bare forward with the eager attention, which
  computes every attention map (what attention statistics need): their floor
  (left out when the model's own attention is the eager one, as
  :func:`toolkit.activations.load_model` builds it: ``forward`` is then that floor);
- ``statistics + attention``: ``activation_stats(model, gradients=False,
  attention=True)``.

Targets (issue 29): statistics at most 1.2x the forward, statistics with
attention at most 1.4x the eager forward. The eager forward's own cost
against the default one is printed too.

Usage::

    .venv/bin/python benchmarks/bench_activations.py [--source ID] [--reps 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402

TARGETS = {"statistics": ("forward", 1.2), "statistics + attention": ("forward, eager", 1.4)}


def runners(source, max_tokens: int, batch_size: int):
    """``({name: callable}, description)`` of the four runs on one loaded model."""
    import torch

    from toolkit.activations import activation_stats, load_model
    from toolkit.activations.attention import eager_attention
    from toolkit.activations.collect import _pad_id
    from toolkit.activations.inputs import as_texts, batches, tokenize

    loaded = load_model(source)
    model = loaded.model.eval()
    ids = tokenize(as_texts(None), loaded.tokenizer, max_tokens=max_tokens, source=str(source))
    plan = batches(ids, batch_size=batch_size, pad_id=_pad_id(loaded.tokenizer, model.config.to_dict()))

    def forward():
        with torch.no_grad():
            for b in plan:
                model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=False)

    def eager():
        with eager_attention(model):
            forward()

    def stats(attention: bool):
        return lambda: activation_stats(loaded, gradients=False, attention=attention, progress=False,
                                        max_tokens=max_tokens, batch_size=batch_size)

    runs = {"forward": forward, "statistics": stats(False), "forward, eager": eager,
            "statistics + attention": stats(True)}
    if str(model.config._attn_implementation) == "eager":  # the model's own forward is the eager one
        del runs["forward, eager"]
    about = {"texts": len(ids), "tokens": sum(map(len, ids)), "batches": len(plan), "batch_size": batch_size,
             "max_tokens": max_tokens, "attn_implementation": str(model.config._attn_implementation)}
    return runs, about


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=None, help="model (default: the embedded SmolLM2-135M)")
    ap.add_argument("--reps", type=int, default=3, help="rounds (each runs the four once)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args(argv)
    rec = H.Results("activations" if args.source is None else f"activations_{Path(args.source).name}")
    print(f"machine: {H.machine()}\n{H.load()} at start")
    H.set_threads(args.threads)
    runs, about = runners(args.source, args.max_tokens, args.batch_size)
    print(f"{about['texts']} texts, {about['tokens']} tokens, {about['batches']} batches of up to "
          f"{about['batch_size']}; the model's attention: {about['attn_implementation']}")
    for run in runs.values():  # warm-up: first-call costs (kernels, lazy imports) off the clock
        run()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.reps):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    rows, ratios = [], {}
    for name, s in seconds.items():
        base, target = TARGETS.get(name, (None, None))
        base = base if base in runs else base and "forward"
        ratio = median[name] / median[base] if base else None
        if ratio is not None:
            ratios[name] = ratio
        rows.append([name, f"{median[name]:.2f} s", f"{min(s):.2f}-{max(s):.2f} s",
                     f"{ratio:.2f}x {base}" if ratio else "", f"<= {target}x" if target else "",
                     H.verdict(ratio <= target) if ratio else ""])
    print(H.table(rows, ["run", "median", "range", "ratio", "target", ""]))
    print(f"{H.load()} at end")
    over = {k: b if b in runs else "forward" for k, (b, _) in TARGETS.items()}
    rec.save({**about, "reps": args.reps, "threads": args.threads or "all cores", "seconds": seconds,
              "median_s": median, "ratios": ratios,
              "targets": {k: {"over": over[k], "at_most": t, "ok": ratios[k] <= t} for k, (_, t) in TARGETS.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
