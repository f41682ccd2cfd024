"""Command line of the lab: ``python -m toolkit.lab`` (or ``python -m toolkit lab``).

Examples::

    python -m toolkit.lab                                  # 5 activations x 200 epochs -> ./attention_lab.nc
    python -m toolkit.lab --preset fast --out /tmp/lab.nc --plot /tmp/lab.png
    python -m toolkit.lab --activations "softmax,x^2/4" --epochs 20 --out my.nc

The default ``--out`` is a file in the current directory, never the committed
result shipped in the package (:data:`toolkit.lab.RESULT_PATH`, which
:func:`toolkit.lab.load_result` reads). To refresh that committed result from a
source checkout, pass it explicitly:
``python -m toolkit.lab --out data/attention_lab.nc``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from toolkit.constraint_types import Exempt
from toolkit.constraints import checks_options
from toolkit.options import arg_type, seed, whole_number

#: Default ``--out`` per preset, relative to the current directory.
DEFAULT_OUT = {"full": "attention_lab.nc", "fast": "lab_fast.nc", "up16": "attention_lab_n65.nc"}


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The lab's arguments, added to ``parser`` (a subcommand's) or a new one."""
    from toolkit.cli.base import Parser
    from toolkit.lab.train import PAPER_ACTIVATIONS, PRESET_NOTES, PRESETS

    p = parser or Parser(
        prog="python -m toolkit.lab",
        description="Train a 12-layer ViT on the 8x8 digits once per attention activation "
                    "and record each layer's attention norm and score scale per epoch (NetCDF, resumable).")
    p.add_argument("--activations", default=",".join(PAPER_ACTIVATIONS),
                   help="comma-separated activations: softmax, x/1, x^3/16, x²/4, x^3/sqrt_n "
                        "(default: the paper's five)")
    p.add_argument("--epochs", type=arg_type(_epochs, "epochs"), default=None,
                   help="epochs per activation, >= 0 (default: the preset's)")
    p.add_argument("--out", default=None,
                   help="NetCDF to write after every epoch and resume from "
                        "(default: ./attention_lab.nc for --preset full, ./attention_lab_n65.nc for up16, "
                        "./lab_fast.nc for fast, else ./lab_NAME.nc; "
                        "the committed result shipped in the package is never the default)")
    p.add_argument("--seed", type=arg_type(_seed, "seed"), default=0, help="0 to 2**64 - 1")
    p.add_argument("--preset", choices=list(PRESETS), default="full", metavar="NAME",
                   help=f"model, images and epochs: {', '.join(PRESETS)} (default full; listed below)")
    p.add_argument("--threads", type=arg_type(_threads, "threads"), default=1,
                   help="torch CPU threads, >= 1 (default 1)")
    p.add_argument("--checkpoint-dir", default=None, help="default: <out>.tmp-checkpoints")
    p.add_argument("--no-resume", action="store_true", help="start over even if --out exists")
    p.add_argument("--plot", default=None, metavar="PNG", help="also save the layer grid figure")
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # keeps the preset list one per line
    p.epilog = preset_list(PRESETS, PRESET_NOTES)
    return p


def preset_list(presets, notes, width: int = 100) -> str:
    """The ``--help`` table of presets: name, N, width and heads, then the note, wrapped."""
    import textwrap

    lines = ["presets (--preset NAME):"]
    for name, cfg in presets.items():
        head = (f"  {name:<10} N = {cfg.num_tokens:<3} {cfg.image_size}x{cfg.image_size} images, "
                f"{cfg.patch_size}x{cfg.patch_size} patches, width {cfg.dim}, {cfg.heads} heads of "
                f"{cfg.dim // cfg.heads}, {cfg.epochs} epochs")
        lines.append(head)
        lines += textwrap.wrap(notes[name], width, initial_indent=" " * 15, subsequent_indent=" " * 15)
    return "\n".join(lines)


def _epochs(value, option, where):
    return whole_number(value, option, where, minimum=0, meaning="0 records the untrained model only")


def _threads(value, option, where):
    return whole_number(value, option, where, minimum=1)


def _seed(value, option, where):
    return seed(value, where, option)


def _check_arguments(args: argparse.Namespace, out: str) -> list[str]:
    """The activations (parsed) and the output paths, before any training; returns the activations.

    Raises
    ------
    UnknownActivationError, InvalidOptionError, OutputPathError
    """
    from toolkit.cli.base import check_plot_path
    from toolkit.errors import InvalidOptionError, OutputPathError
    from toolkit.io import check_output_path
    from toolkit.lab.attention import parse_activation

    acts = [a.strip() for a in args.activations.split(",") if a.strip()]
    if not acts:
        raise InvalidOptionError("--activations", args.activations, "a comma-separated list of at least one "
                                 "activation, e.g. 'softmax,x^3/16'")
    for a in acts:
        parse_activation(a)
    check_output_path(out, "--out", "attention_lab.nc")
    if args.checkpoint_dir and Path(args.checkpoint_dir).exists() and not Path(args.checkpoint_dir).is_dir():
        raise OutputPathError(args.checkpoint_dir, "--checkpoint-dir is a file; give a folder")
    if args.plot:
        check_plot_path(args.plot, "lab.png")
    return acts


def run(args: argparse.Namespace) -> int:
    """Run the experiment the parsed ``args`` describe; print a summary."""
    from toolkit.lab.train import run_experiment

    out = args.out or DEFAULT_OUT.get(args.preset, f"lab_{args.preset}.nc")
    acts = _check_arguments(args, out)
    ds = run_experiment(acts, args.epochs, out, args.seed, args.preset,
                        resume=not args.no_resume, checkpoint_dir=args.checkpoint_dir,
                        threads=args.threads, progress=True)
    last = ds.sizes["epoch"] - 1
    print(f"wrote {out}: {ds.sizes['activation']} activations x {last} epochs, "
          f"N = {ds.attrs['num_tokens']} tokens, sqrt(N) = {math.sqrt(ds.attrs['num_tokens']):.2f}")
    for label in ds["activation"].values.tolist():
        row = ds.sel(activation=label)
        print(f"  {label:>8}: test accuracy {float(row.test_accuracy[last]):.3f}, "
              f"attention norm (mean over layers) {float(row.attention_norm[last].mean()):.3g}, "
              f"{float(row.epoch_time.mean()):.2f} s/epoch, "
              f"{int(row.skipped_steps.sum())} skipped steps")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from toolkit.cli.base import save_figure
        from toolkit.plot import layer_grid

        save_figure(layer_grid(ds, "attention_norm"), args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return 0


@checks_options(argv=Exempt("the command line's arguments (None: sys.argv); a bad one is argparse's one-line "
                             "error, exit 2"))
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``) and run; returns the exit code
    (2 with a one-line message for a toolkit error or a bad argument)."""
    from toolkit.cli.base import run_command

    return run_command(run, build_parser().parse_args(argv))
