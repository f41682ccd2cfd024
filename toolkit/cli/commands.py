"""Command line: ``python -m toolkit weights MODEL -o out.nc --plot out.png``.

The ``weights``, ``compare`` and ``series`` commands, and the parser that
gathers them with ``finetune`` (:mod:`toolkit.finetune.cli`) and ``lab``
(:mod:`toolkit.lab.cli`). A thin argparse front end over :mod:`toolkit.collect` and :mod:`toolkit.plot`.
Toolkit errors and bad arguments are printed as one line (no traceback, no
usage block) with exit status 2; an unexpected error (a bug) as one line with
exit status 1 (``TOOLKIT_TRACEBACK=1`` shows its traceback). The numeric
options (``--k``, ``--tolerance``, ``--steps``), the output paths (``-o``,
``--plot``) and the metric to plot are checked before any computing, so a
typo there does not cost a whole run.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import NoReturn

from toolkit import options
from toolkit.cli.base import (
    Parser,
    announce_new_folder,
    check_output,
    check_plot_path,
    cli_message,
    exit_process,
    passed_through,
    run_command,
    save_figure,
    write_output,
)
from toolkit.errors import ToolkitError, UnknownMetricError
from toolkit.redaction import redact_text


def _add_source_args(p: argparse.ArgumentParser, name: str = "model", help_default: str = "") -> None:
    p.add_argument(name, nargs="?", default=None, help=f"hub id, local directory or .gguf file{help_default}")
    p.add_argument("--gguf-file", default=None, help="GGUF file name inside a directory or hub repo")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument("--download", action="store_true",
                   help="download a hub repo that is not cached, instead of reading its safetensors in place")


def _text_type(parse, label: str):
    """An argparse ``type`` from a text parser that raises ValueError (one line, exit 2)."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = label
    return convert


def _add_selection_args(p: argparse.ArgumentParser) -> None:
    """``--layers``, ``--components``, ``--experts``, ``--fill``: part of the model (toolkit.collect.plan.selection)."""
    from toolkit.collect.plan.selection import parse_index, parse_names

    g = p.add_argument_group("selection (only the selected tensors are read; default: the whole model)")
    g.add_argument("--layers", type=_text_type(parse_index, "layers"), default=None, metavar="SPEC",
                   help="layers as Python indexes a list: 3, -1, 0,4,8 or a slice 0:28:4")
    g.add_argument("--components", type=_text_type(parse_names, "components"), default=None, metavar="NAMES",
                   help="components as in the Dataset or patterns, comma-separated: attn.q,mlp.router or attn.*")
    g.add_argument("--experts", type=_text_type(lambda text: parse_index(text, "experts"), "experts"), default=None,
                   metavar="SPEC",
                   help="routed experts of the MoE layers, as --layers")
    g.add_argument("--fill", action="store_true", help="keep the whole grid, the cells left out NaN")


def _selection(args) -> dict:
    return dict(layers=args.layers, components=args.components, experts=args.experts, fill=args.fill)


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
    from toolkit.metrics.registry import list_metrics, resolve_metrics

    if args.output:
        check_output(args.output, "-o/--output", "stats.nc")
    if args.plot and not passed_through(args.plot):
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
            raise ToolkitError(f"--plot-metric {wanted!r}: {cli_message(e)}") from e
    raise ToolkitError(  # a metric of this kind, left out of --metrics
        f"--plot-metric {wanted!r} is not computed: add it to --metrics "
        f"(--metrics {' '.join(computed)} {wanted}), or leave out --plot-metric to plot {fallback!r}"
    )


def _plain(text: str) -> str:
    """``text`` without reStructuredText markup (double backticks), as ``--help`` prints it."""
    return re.sub(r"``(.+?)``", r"\1", text)


def _save_outputs(ds, args, plot_metric: str | None, plot_ds=None) -> int:
    """Write ``-o`` (``ds``) and ``--plot`` (the heatmap of ``plot_metric`` in
    ``plot_ds``, default ``ds``), or print ``ds`` when neither is asked for; an
    ``OSError`` becomes an :class:`OutputPathError`. Returns the exit status, 0."""
    if not args.output and not args.plot:
        print(ds)
    if args.output:
        done = write_output(ds, args.output)
        print(done, file=sys.stderr if passed_through(args.output) else sys.stdout)
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
        print(f"opening {redact_text(what)} \u2026", file=sys.stderr, flush=True)  # a URL's secrets masked


def _cmd_weights(args) -> int:
    import toolkit

    plot_metric = _prepare_outputs(args, "weight", "stable_rank")
    _opening(args, args.model or "the embedded SmolLM2-135M-Instruct GGUF")
    ds = toolkit.weight_stats(
        args.model,
        metrics=args.metrics,
        gguf_file=args.gguf_file,
        revision=args.revision,
        download=args.download,
        device=args.device,
        progress=not args.quiet,
        precision=args.precision,
        fit=_fit_options(args),
        per_head=args.per_head,
        **_selection(args),
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
    _opening(args, f"{args.base} and {args.target}" if args.target else f"{args.base} and its base")
    ds = toolkit.compare(
        args.base, args.target, metrics=args.metrics, tolerance=args.tolerance, k=args.k,
        device=args.device, progress=not args.quiet, download=args.download, **_selection(args),
    )
    return _save_outputs(ds, args, plot_metric)


def _cmd_series(args) -> int:
    import toolkit

    plot_metric = _prepare_outputs(args, "diff", "relative_change")
    _opening(args, f"{len(args.checkpoints)} checkpoints")
    ds = toolkit.compare_series(
        args.checkpoints, steps=args.steps, reference=args.reference, metrics=args.metrics,
        tolerance=args.tolerance, k=args.k, device=args.device, progress=not args.quiet,
        client=args.scheduler, download=args.download, **_selection(args),
    )
    # the plot is the last checkpoint's heatmap
    return _save_outputs(ds, args, plot_metric, plot_ds=ds.isel(checkpoint=-1) if args.plot else None)


def _add_output_args(p: argparse.ArgumentParser, default_plot: str) -> None:
    """``--device``, ``-o``, ``--plot``, ``--plot-metric`` and ``-q``, shared by the subcommands."""
    p.add_argument("--device", default="cpu", help="device for the spectral work: cpu or cuda")
    p.add_argument("-o", "--output", default=None,
                   help="NetCDF file to write (- for standard output, /dev/null to discard; any other device, "
                   "FIFO or folder is refused, a symbolic link's target is replaced)")
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
    p.add_argument("--download", action="store_true",
                   help="download hub repos that are not cached, instead of reading their safetensors in place")
    _add_selection_args(p)
    _add_output_args(p, "relative_change")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m toolkit", description=_plain(__doc__.splitlines()[0]))
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("weights", help="statistics of every weight matrix, per layer and component")
    _add_source_args(w, help_default=" (default: the embedded SmolLM2-135M-Instruct GGUF)")
    w.add_argument("--metrics", nargs="+", default=None, help="metric names (default: all registered)")
    w.add_argument("--precision", choices=["float64", "float32", "float32-certified"], default="float64",
                   help="precision of the singular values (default float64; float32 is faster on large shapes, see "
                        "benchmarks/README.md; float32-certified: float32 where a per-cell certificate shows every "
                        "spectral metric within tolerance of float64, float64 elsewhere)")
    _add_fit_args(w)
    _add_selection_args(w)
    _add_output_args(w, "stable_rank")
    w.set_defaults(func=_cmd_weights)

    c = sub.add_parser("compare", help="diff metrics of a base and a target checkpoint, per layer and component")
    c.add_argument("base", help="base checkpoint: hub id, local directory or .gguf file")
    c.add_argument("target", nargs="?", default=None,
                   help="target checkpoint (fine-tuned); left out when BASE is a LoRA adapter folder, which is "
                        "compared with the base it records")
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


def run() -> NoReturn:
    """The ``toolkit`` script and ``python -m toolkit``: :func:`main` on ``sys.argv``, its status the process's
    exit status (:func:`toolkit.cli.base.exit_process`)."""
    exit_process(main())

