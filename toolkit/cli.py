"""Command line: ``python -m toolkit weights MODEL -o out.nc --plot out.png``.

A thin argparse front end over :mod:`toolkit.collect` and :mod:`toolkit.plot`.
Toolkit errors and bad arguments are printed as one line (no traceback, no
usage block) with exit status 2; an unexpected error (a bug) as one line with
exit status 1 (``TOOLKIT_TRACEBACK=1`` shows its traceback). The numeric
options (``--k``, ``--tolerance``, ``--steps``), the output paths (``-o``,
``--plot``) and the metric to plot are checked before any computing, so a
typo there does not cost a whole run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from toolkit import options
from toolkit.errors import HubUnreachableError, OutputPathError, ToolkitError, UnknownMetricError


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``error: PROG: MESSAGE (see PROG --help)``, exit 2."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def run_command(func: Callable, args) -> int:
    """``func(args)`` as a command: a :class:`ToolkitError` is printed on one line with
    exit status 2, an unexpected exception on one line with status 1 (set
    ``TOOLKIT_TRACEBACK=1`` to see its traceback), Ctrl-C exits 130."""
    try:
        return int(func(args) or 0)
    except ToolkitError as e:
        print(f"error: {_cli_message(e)}".replace("\n", " "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("TOOLKIT_TRACEBACK", "").strip() not in ("", "0"):
            raise
        print(f"error: unexpected {type(e).__name__}: {str(e)[:300]} ".replace("\n", " ")
              + "(a bug of the toolkit, not of your input: please report it with the command line; "
              "TOOLKIT_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


def _add_source_args(p: argparse.ArgumentParser, name: str = "model", help_default: str = "") -> None:
    p.add_argument(name, nargs="?", default=None, help=f"hub id, local directory or .gguf file{help_default}")
    p.add_argument("--gguf-file", default=None, help="GGUF file name inside a directory or hub repo")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")


#: How each metric kind is computed on the command line (error messages).
_CLI_COMMANDS = {
    "weight": "python -m toolkit weights MODEL --metrics NAME",
    "diff": "python -m toolkit compare BASE TARGET --metrics NAME "
            "(or: python -m toolkit series CKPT... --metrics NAME)",
}


def _prepare_outputs(args, kind: str, default_metric: str) -> str | None:
    """Check, before any computing, the output paths and the metric to plot.

    Returns the metric to plot (``None`` without ``--plot``): ``--plot-metric``
    when given, else ``default_metric`` when it is computed, else the first
    metric computed.

    Raises
    ------
    OutputPathError
        ``-o`` or ``--plot`` cannot be written (a folder, a folder that cannot
        be written...).
    ToolkitError
        ``--plot-metric`` names a metric that is not computed.
    UnknownMetricError
        A ``--metrics`` name that is not a metric of ``kind``.
    """
    from toolkit.io import check_output_path
    from toolkit.metrics.registry import list_metrics, resolve_metrics

    if args.output:
        check_output_path(args.output, "-o/--output", "stats.nc")
        announce_new_folder(args.output, "-o/--output")
    if args.plot:
        check_plot_path(args.plot, "heatmap.png")
        announce_new_folder(args.plot, "--plot")
    computed = [m.name for m in resolve_metrics(args.metrics, kind=kind)]
    if not args.plot:
        return None
    fallback = default_metric if default_metric in computed else computed[0]
    wanted = args.plot_metric
    if wanted is None or wanted in computed:
        return wanted or fallback
    if wanted not in list_metrics(kind, opt_in=True):
        try:
            resolve_metrics([wanted], kind=kind)  # raises: names the kind, the close matches, the known metrics
        except UnknownMetricError as e:
            raise ToolkitError(f"--plot-metric {wanted!r}: {_cli_message(e)}") from e
    raise ToolkitError(  # a metric of this kind, left out of --metrics
        f"--plot-metric {wanted!r} is not computed: add it to --metrics "
        f"(--metrics {' '.join(computed)} {wanted}), or leave out --plot-metric to plot {fallback!r}"
    )


def check_plot_path(path: str, example: str) -> None:
    """``--plot``: a file that can be written, in an image format matplotlib writes.

    Raises
    ------
    OutputPathError
    """
    from matplotlib.backend_bases import FigureCanvasBase

    from toolkit.io import check_output_path

    check_output_path(path, "--plot", example)
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix and suffix not in formats:
        raise OutputPathError(
            path, f"--plot must name an image file; .{suffix} is not a format matplotlib writes "
            f"(use one of: {', '.join('.' + f for f in sorted(formats))})"
        )


def announce_new_folder(path: str, option: str) -> Path | None:
    """Say on stderr, before any computing, that the folder of ``path`` does not exist and will be
    created when the file is written (so a mistyped folder is seen at once, not found later).

    Returns the first missing folder (the one that will be created), or None when the folder exists.
    """
    folder = Path(os.path.expanduser(os.fspath(path))).absolute().parent
    if folder.is_dir():
        return None
    missing = folder
    while not missing.parent.is_dir() and missing.parent != missing:
        missing = missing.parent
    print(f"note: {option}: the folder {str(missing)!r} does not exist; it will be created "
          f"for {os.fspath(path)!r}", file=sys.stderr)
    return missing


def save_figure(fig, path: str, **savefig) -> None:
    """Write ``fig`` to ``--plot`` (folders created) and close it; an ``OSError`` becomes an
    :class:`OutputPathError`."""
    import matplotlib.pyplot as plt

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, **savefig)
    except OSError as e:
        raise OutputPathError(path, f"{e.strerror or e}; choose another path for --plot", e.errno) from e
    finally:
        plt.close(fig)


def _cli_message(e: ToolkitError) -> str:
    """The error's message, plus the command that computes a metric of another kind."""
    # a bare name that is neither a path nor in the hub cache (a partial cached copy, the other
    # HubUnreachableError, has a toolkit error as its cause: that name was meant as a hub id)
    if isinstance(e, HubUnreachableError) and _bare_name(e.source) and not isinstance(e.__cause__, ToolkitError):
        return (f"no such folder or file {e.source!r} in {os.getcwd()!r} (nor a hub model this machine can "
                "fetch: the hub is offline or unreachable, and the local Hugging Face cache has no copy). "
                "Check the path; for a hub id, connect to the network or point HF_HUB_CACHE at the cache "
                "that holds it.")
    msg = str(e)
    kind = getattr(e, "actual_kind", None) if isinstance(e, UnknownMetricError) else None
    if kind in _CLI_COMMANDS:
        msg += f" On the command line: {_CLI_COMMANDS[kind].replace('NAME', e.name)}."
    return msg


def _bare_name(source: str) -> bool:
    """A name without an ``org/`` part that is no existing path: meant as a folder more often than as
    one of the hub's few legacy ids (``gpt2``)."""
    return "/" not in source and os.sep not in source and not Path(os.path.expanduser(source)).exists()


def _plain(text: str) -> str:
    """``text`` without reStructuredText markup (double backticks), as ``--help`` prints it."""
    return re.sub(r"``(.+?)``", r"\1", text)


def _save_outputs(ds, args, plot_metric: str | None, plot_ds=None) -> int:
    """Write ``-o`` (``ds``) and ``--plot`` (the heatmap of ``plot_metric`` in
    ``plot_ds``, default ``ds``), or print ``ds`` when neither is asked for; an
    ``OSError`` becomes an :class:`OutputPathError`. Returns the exit status, 0."""
    import toolkit

    if not args.output and not args.plot:
        print(ds)
    if args.output:
        toolkit.save(ds, args.output)
        print(f"wrote {args.output}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from toolkit import plot

        ax = plot.heatmap(ds if plot_ds is None else plot_ds, plot_metric)
        save_figure(ax.figure, args.plot, dpi=150, bbox_inches="tight")
        print(f"wrote {args.plot} ({plot_metric})")
    return 0


def _opening(args, what: str) -> None:
    """Say on stderr what is being opened: the bar appears only once the checkpoints' tensors are listed
    (reading a GGUF header imports transformers' model code: seconds)."""
    if not args.quiet:
        print(f"opening {what} \u2026", file=sys.stderr, flush=True)


def _cmd_weights(args) -> int:
    import toolkit

    plot_metric = _prepare_outputs(args, "weight", "stable_rank")
    _opening(args, args.model or "the embedded SmolLM2-135M-Instruct GGUF")
    ds = toolkit.weight_stats(
        args.model,
        metrics=args.metrics,
        gguf_file=args.gguf_file,
        revision=args.revision,
        device=args.device,
        progress=not args.quiet,
        precision=args.precision,
        fit=_fit_options(args),
        per_head=args.per_head,
    )
    return _save_outputs(ds, args, plot_metric)


def _fit_options(args):
    """The :class:`toolkit.FitOptions` of ``weights``' fit flags."""
    from toolkit.metrics.fit_options import FitOptions

    return FitOptions(fix_fingers=args.fix_fingers, xmax=args.xmax, min_evals=args.min_evals,
                      max_evals=args.max_evals, max_N=args.max_n, seed=args.seed)


def _positive(value, option, where):
    return options.whole_number(value, option, where, minimum=1)


def _add_fit_args(p: argparse.ArgumentParser) -> None:
    """The options of the spectral fits (toolkit.FitOptions)."""
    g = p.add_argument_group("spectral fits (toolkit.FitOptions; default: WeightWatcher 0.7.7's analyze())")
    g.add_argument("--fix-fingers", choices=["xmin_peak", "clip_xmax"], default=None,
                   help="WeightWatcher's finger fix of the power-law fit")
    g.add_argument("--xmax", type=options.arg_type(_positive, "xmax"), default=None, metavar="K",
                   help="leave the K largest eigenvalues out of the fit (WeightWatcher's xmax=-K)")
    for flag, name in (("--min-evals", "min_evals"), ("--max-evals", "max_evals"), ("--max-n", "max_N")):
        g.add_argument(flag, type=options.arg_type(_positive, name), default=None, dest=name.lower(),
                       help=f"NaN for the matrices WeightWatcher skips by its {name} rule (default: measure all)")
    g.add_argument("--seed", type=options.arg_type(lambda v, o, w: options.seed(v, w, o), "seed"), default=0,
                   help="seed of the randomized metrics (rand_distance, rand_num_spikes)")
    g.add_argument("--per-head", action="store_true",
                   help="also the spectrum of each attention head (alpha/stable_rank/spectral_norm _per_head)")


def _cmd_compare(args) -> int:
    import toolkit

    plot_metric = _prepare_outputs(args, "diff", "relative_change")
    _opening(args, f"{args.base} and {args.target}")
    ds = toolkit.compare(
        args.base, args.target, metrics=args.metrics, tolerance=args.tolerance, k=args.k,
        device=args.device, progress=not args.quiet,
    )
    return _save_outputs(ds, args, plot_metric)


def _cmd_series(args) -> int:
    import toolkit

    plot_metric = _prepare_outputs(args, "diff", "relative_change")
    _opening(args, f"{len(args.checkpoints)} checkpoints")
    ds = toolkit.compare_series(
        args.checkpoints, steps=args.steps, reference=args.reference, metrics=args.metrics,
        tolerance=args.tolerance, k=args.k, device=args.device, progress=not args.quiet,
        client=args.scheduler,
    )
    # the plot is the last checkpoint's heatmap
    return _save_outputs(ds, args, plot_metric, plot_ds=ds.isel(checkpoint=-1) if args.plot else None)


def _add_output_args(p: argparse.ArgumentParser, default_plot: str) -> None:
    """``--device``, ``-o``, ``--plot``, ``--plot-metric`` and ``-q``, shared by the subcommands."""
    p.add_argument("--device", default="cpu", help="device for the spectral work: cpu or cuda")
    p.add_argument("-o", "--output", default=None, help="NetCDF file to write")
    p.add_argument("--plot", default=None, help="heatmap PNG to write")
    p.add_argument("--plot-metric", default=None,
                   help=f"metric to plot, one of --metrics (default: {default_plot} if computed, else the first)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _tolerance(value, option, where):
    return options.diff_options(where, value, 1)[0]


def _subspace_k(value, option, where):
    return options.diff_options(where, 0.0, value)[1]


def _step(value, option, where):
    return options.whole_number(value, option, where, minimum=0, meaning="a training step")


def _add_diff_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metrics", nargs="+", default=None, help="diff metric names (default: all)")
    p.add_argument("--tolerance", type=options.arg_type(_tolerance, "tolerance", float), default=0.0,
                   help="|t - b| <= tolerance counts as unchanged (a finite number >= 0)")
    p.add_argument("--k", type=options.arg_type(_subspace_k, "k"), default=16,
                   help="subspace dimension for subspace_overlap (a whole number >= 1)")
    _add_output_args(p, "relative_change")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m toolkit", description=_plain(__doc__.splitlines()[0]))
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("weights", help="statistics of every weight matrix, per layer and component")
    _add_source_args(w, help_default=" (default: the embedded SmolLM2-135M-Instruct GGUF)")
    w.add_argument("--metrics", nargs="+", default=None, help="metric names (default: all registered)")
    w.add_argument("--precision", choices=["float64", "float32"], default="float64",
                   help="precision of the singular values (default float64; float32 is ~1.7x faster on 7B shapes, see "
                        "docs/scaling.md)")
    _add_fit_args(w)
    _add_output_args(w, "stable_rank")
    w.set_defaults(func=_cmd_weights)

    c = sub.add_parser("compare", help="diff metrics of a base and a target checkpoint, per layer and component")
    c.add_argument("base", help="base checkpoint: hub id, local directory or .gguf file")
    c.add_argument("target", help="target checkpoint (fine-tuned)")
    _add_diff_args(c)
    c.set_defaults(func=_cmd_compare)

    s = sub.add_parser("series", help="diff metrics along a series of checkpoints (a training run)")
    s.add_argument("checkpoints", nargs="+", help="checkpoints in training order")
    s.add_argument("--steps", nargs="+", type=options.arg_type(_step, "step"), default=None,
                   help="training step of each checkpoint (distinct whole numbers >= 0)")
    s.add_argument("--reference", choices=["first", "previous"], default="first",
                   help="diff against the first or the previous checkpoint")
    _add_diff_args(s)
    s.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="Dask scheduler address (tcp://host:8786): one task per checkpoint x tensor on the cluster; "
                        "workers read the checkpoints from a shared path (pip install 'toolkit[distributed]')")
    s.set_defaults(func=_cmd_series)

    from toolkit.finetune import cli as finetune_cli

    f = sub.add_parser("finetune", help="fine-tune the embedded SmolLM2 on the default math text "
                       "(data/finetune.txt, installed with the package), saving bf16 checkpoints")
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
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
