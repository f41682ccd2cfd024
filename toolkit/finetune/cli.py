"""Command line of the fine-tune: ``python -m toolkit finetune OUT_DIR [--preset short|full] ...``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from toolkit import options
from toolkit.cli.base import Parser, run_command
from toolkit.errors import OutputPathError
from toolkit.finetune.run import PRESETS, finetune


def _count(value, option, where):
    return options.whole_number(value, option, where, minimum=1)


def _learning_rate(value, option, where):
    return options.real_number(value, option, where, above=0.0)


def _seed(value, option, where):
    return options.seed(value, where, option)


#: The numeric options: (flag, check, convert, help).
_NUMBERS = (
    ("steps", _count, int, "optimiser steps (>= 1)"),
    ("save-every", _count, int, "save a checkpoint every this many steps (>= 1)"),
    ("seq-len", _count, int, "tokens per training sequence (>= 1)"),
    ("batch-size", _count, int, "sequences per step (>= 1)"),
    ("lr", _learning_rate, float, "AdamW learning rate (> 0)"),
)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``python -m toolkit finetune`` (added to ``parser`` when given)."""
    p = parser or Parser(prog="python -m toolkit finetune",
                         description="Fine-tune a causal LM on the CPU, saving bf16 checkpoints.")
    p.add_argument("out_dir", help="run folder (gets step-NNNNN/ checkpoints and run.json)")
    p.add_argument("--base", default=None, help="hub id, folder or .gguf (default: the embedded SmolLM2-135M)")
    p.add_argument("--text", default=None, help="UTF-8 training text (default: the packaged data/finetune.txt)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="full", help="default settings (full: 40 steps)")
    for name, check, kind, what in _NUMBERS:
        p.add_argument(f"--{name}", type=options.arg_type(check, name, kind), default=None,
                       help=f"{what}; overrides the preset")
    p.add_argument("--seed", type=options.arg_type(_seed, "seed"), default=0, help="0 to 2**64 - 1")
    p.add_argument("--overwrite", action="store_true", help="replace a run made with other settings")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return p


def _check_paths(args) -> None:
    """Before loading anything: the training text is a UTF-8 file, and the run folder is not a file."""
    if args.text is not None:
        options.read_text_file(args.text, "training text (--text)")
    out = Path(os.path.expanduser(args.out_dir))
    if out.exists() and not out.is_dir():
        raise OutputPathError(args.out_dir, "the run folder (OUT_DIR) is a file; choose a new or empty folder")
    above = next((q for q in out.parents if q.exists()), None)
    if above is not None and not above.is_dir():
        raise OutputPathError(args.out_dir, f"{str(above)!r} is a file, not a folder; choose another OUT_DIR")


def run_from_args(args) -> int:
    """Run :func:`finetune` from parsed :func:`build_parser` arguments; prints the checkpoints."""
    _check_paths(args)
    run = finetune(args.out_dir, base=args.base, text=args.text, preset=args.preset, steps=args.steps,
                   save_every=args.save_every, seq_len=args.seq_len, batch_size=args.batch_size, lr=args.lr,
                   seed=args.seed, overwrite=args.overwrite, progress=not args.quiet)
    loss = f", loss {run.losses[0]:.3f} -> {run.losses[-1]:.3f}" if run.losses else ""
    print(f"{len(run.checkpoints)} checkpoints in {run.out_dir} (steps {run.steps}{loss})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m toolkit.finetune OUT_DIR ...``; toolkit errors and bad arguments exit with status 2 (one line)."""
    args = build_parser().parse_args(argv)
    return run_command(run_from_args, args)
