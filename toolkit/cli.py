"""Command line: ``python -m toolkit weights MODEL -o out.nc --plot out.png``.

A thin argparse front end over :mod:`toolkit.collect` and :mod:`toolkit.plot`.
Toolkit errors are printed as one message (no traceback) with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toolkit.errors import ToolkitError


def _add_source_args(p: argparse.ArgumentParser, name: str = "model", help_default: str = "") -> None:
    p.add_argument(name, nargs="?", default=None, help=f"hub id, local directory or .gguf file{help_default}")
    p.add_argument("--gguf-file", default=None, help="GGUF file name inside a directory or hub repo")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")


def _save_outputs(ds, args, default_metric: str) -> None:
    import toolkit

    if args.output:
        toolkit.save(ds, args.output)
        print(f"wrote {args.output}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from toolkit import plot

        metric = args.plot_metric or default_metric
        ax = plot.heatmap(ds, metric)
        fig = ax.figure
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=150, bbox_inches="tight")
        plt.close(fig)
        print(f"wrote {args.plot} ({metric})")


def _cmd_weights(args) -> int:
    import toolkit

    ds = toolkit.weight_stats(
        args.model,
        metrics=args.metrics,
        gguf_file=args.gguf_file,
        revision=args.revision,
        device=args.device,
        progress=not args.quiet,
    )
    _save_outputs(ds, args, "stable_rank")
    if not args.output and not args.plot:
        print(ds)
    return 0


def _cmd_compare(args) -> int:
    import toolkit

    ds = toolkit.compare(
        args.base, args.target, metrics=args.metrics, tolerance=args.tolerance, k=args.k,
        device=args.device, progress=not args.quiet,
    )
    _save_outputs(ds, args, "relative_change")
    if not args.output and not args.plot:
        print(ds)
    return 0


def _cmd_series(args) -> int:
    import toolkit

    ds = toolkit.compare_series(
        args.checkpoints, steps=args.steps, reference=args.reference, metrics=args.metrics,
        tolerance=args.tolerance, k=args.k, device=args.device, progress=not args.quiet,
        client=args.scheduler,
    )
    if args.output:
        toolkit.save(ds, args.output)
        print(f"wrote {args.output}")
    if args.plot:  # the last checkpoint's heatmap
        _save_outputs(ds.isel(checkpoint=-1), argparse.Namespace(**{**vars(args), "output": None}), "relative_change")
    if not args.output and not args.plot:
        print(ds)
    return 0


def _add_diff_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", nargs="+", default=None, help="diff metric names (default: all)")
    p.add_argument("--tolerance", type=float, default=0.0, help="|t - b| <= tolerance counts as unchanged")
    p.add_argument("--k", type=int, default=16, help="subspace dimension for subspace_overlap")
    p.add_argument("--device", default="cpu", help="device for the spectral work: cpu or cuda")
    p.add_argument("-o", "--output", default=None, help="NetCDF file to write")
    p.add_argument("--plot", default=None, help="heatmap PNG to write")
    p.add_argument("--plot-metric", default=None, help="metric to plot (default: relative_change)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m toolkit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("weights", help="statistics of every weight matrix, per layer and component")
    _add_source_args(w, help_default=" (default: the embedded SmolLM2-135M-Instruct GGUF)")
    w.add_argument("--metrics", nargs="+", default=None, help="metric names (default: all registered)")
    w.add_argument("--device", default="cpu", help="device for the spectral work: cpu or cuda")
    w.add_argument("-o", "--output", default=None, help="NetCDF file to write")
    w.add_argument("--plot", default=None, help="heatmap PNG to write")
    w.add_argument("--plot-metric", default=None, help="metric to plot (default: stable_rank)")
    w.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    w.set_defaults(func=_cmd_weights)

    c = sub.add_parser("compare", help="diff metrics of a base and a target checkpoint, per layer and component")
    c.add_argument("base", help="base checkpoint: hub id, local directory or .gguf file")
    c.add_argument("target", help="target checkpoint (fine-tuned)")
    _add_diff_args(c)
    c.set_defaults(func=_cmd_compare)

    s = sub.add_parser("series", help="diff metrics along a series of checkpoints (a training run)")
    s.add_argument("checkpoints", nargs="+", help="checkpoints in training order")
    s.add_argument("--steps", nargs="+", type=int, default=None, help="training step of each checkpoint")
    s.add_argument("--reference", choices=["first", "previous"], default="first", help="diff against the first or the previous checkpoint")
    _add_diff_args(s)
    s.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:8786): one task per checkpoint x tensor on the cluster; "
                        "workers read the checkpoints from a shared path (pip install 'toolkit[distributed]')")
    s.set_defaults(func=_cmd_series)

    from toolkit.finetune import cli as finetune_cli

    f = sub.add_parser("finetune", help="fine-tune the embedded SmolLM2 on the packaged math text (toolkit/data/finetune.txt), saving bf16 checkpoints")
    finetune_cli.build_parser(f)
    f.set_defaults(func=finetune_cli.run_from_args)

    from toolkit.lab import cli as lab_cli

    lab = sub.add_parser("lab", help="attention-activation lab: softmax vs polynomial attention over training")
    lab_cli.build_parser(lab)
    lab.set_defaults(func=lab_cli.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m toolkit`` and the ``toolkit`` script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ToolkitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
