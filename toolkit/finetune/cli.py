"""Command line of the fine-tune: ``python -m toolkit finetune OUT_DIR [--preset short|full] ...``."""

from __future__ import annotations

import argparse
import sys

from toolkit.errors import ToolkitError
from toolkit.finetune.run import PRESETS, finetune


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``python -m toolkit finetune`` (added to ``parser`` when given)."""
    p = parser or argparse.ArgumentParser(prog="python -m toolkit finetune",
                                          description="Fine-tune a causal LM on the CPU, saving bf16 checkpoints.")
    p.add_argument("out_dir", help="run folder (gets step-NNNNN/ checkpoints and run.json)")
    p.add_argument("--base", default=None, help="hub id, folder or .gguf (default: the embedded SmolLM2-135M)")
    p.add_argument("--text", default=None, help="UTF-8 training text (default: the packaged data/finetune.txt)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="full", help="default settings (full: 40 steps)")
    for name, kind in (("steps", int), ("save-every", int), ("seq-len", int), ("batch-size", int), ("lr", float)):
        p.add_argument(f"--{name}", type=kind, default=None, help="override the preset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true", help="replace a run made with other settings")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def run_from_args(args) -> int:
    """Run :func:`finetune` from parsed :func:`build_parser` arguments; prints the checkpoints."""
    run = finetune(args.out_dir, base=args.base, text=args.text, preset=args.preset, steps=args.steps,
                   save_every=args.save_every, seq_len=args.seq_len, batch_size=args.batch_size, lr=args.lr,
                   seed=args.seed, overwrite=args.overwrite, progress=not args.quiet)
    loss = f", loss {run.losses[0]:.3f} -> {run.losses[-1]:.3f}" if run.losses else ""
    print(f"{len(run.checkpoints)} checkpoints in {run.out_dir} (steps {run.steps}{loss})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m toolkit.finetune OUT_DIR ...``; toolkit errors exit with status 2."""
    args = build_parser().parse_args(argv)
    try:
        return run_from_args(args)
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
