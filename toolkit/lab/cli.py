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
import sys
from collections.abc import Sequence

#: Default ``--out`` per preset, relative to the current directory.
DEFAULT_OUT = {"full": "attention_lab.nc", "fast": "lab_fast.nc"}


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The lab's arguments, added to ``parser`` (a subcommand's) or a new one."""
    from toolkit.lab.train import PAPER_ACTIVATIONS, PRESETS

    p = parser or argparse.ArgumentParser(
        prog="python -m toolkit.lab",
        description="Train a 12-layer ViT on the 8x8 digits once per attention activation "
                    "and record each layer's attention norm per epoch (NetCDF, resumable).")
    p.add_argument("--activations", default=",".join(PAPER_ACTIVATIONS),
                   help="comma-separated activations: softmax, x/1, x^3/16, x²/4, x^3/sqrt_n "
                        "(default: the paper's five)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per activation (default: the preset's)")
    p.add_argument("--out", default=None,
                   help="NetCDF to write after every epoch and resume from "
                        "(default: ./attention_lab.nc for --preset full, else ./lab_fast.nc; "
                        "the committed result shipped in the package is never the default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", choices=sorted(PRESETS), default="full")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--checkpoint-dir", default=None, help="default: <out>.tmp-checkpoints")
    p.add_argument("--no-resume", action="store_true", help="start over even if --out exists")
    p.add_argument("--plot", default=None, metavar="PNG", help="also save the layer grid figure")
    return p


def run(args: argparse.Namespace) -> int:
    """Run the experiment the parsed ``args`` describe; print a summary."""
    from toolkit.errors import ToolkitError
    from toolkit.lab.train import run_experiment

    out = args.out or DEFAULT_OUT.get(args.preset, f"lab_{args.preset}.nc")
    acts = [a.strip() for a in args.activations.split(",") if a.strip()]
    try:
        ds = run_experiment(acts, args.epochs, out, args.seed, args.preset,
                            resume=not args.no_resume, checkpoint_dir=args.checkpoint_dir,
                            threads=args.threads, progress=True)
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
        import matplotlib.pyplot as plt

        from toolkit.plot import layer_grid

        fig = layer_grid(ds, "attention_norm")
        fig.savefig(args.plot, dpi=110)
        plt.close(fig)
        print(f"wrote {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``) and run; returns the exit code."""
    return run(build_parser().parse_args(argv))
