"""What every command line of the toolkit shares: the one-line argument errors, the one-line
error handling, and the checks and writing of ``--plot`` figures.

Used by the main command line (:mod:`toolkit.cli.commands`), ``python -m
toolkit.finetune`` (:mod:`toolkit.finetune.cli`) and ``python -m toolkit.lab``
(:mod:`toolkit.lab.cli`); it imports none of them.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from toolkit.errors import HubUnreachableError, OutputPathError, ToolkitError, UnknownMetricError
from toolkit.redaction import redact_text


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
        print(f"error: {cli_message(e)}".replace("\n", " "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if os.environ.get("TOOLKIT_TRACEBACK", "").strip() not in ("", "0"):
            raise
        print(f"error: unexpected {type(e).__name__}: {redact_text(str(e))[:300]} ".replace("\n", " ")
              + "(a bug of the toolkit, not of your input: please report it with the command line; "
              "TOOLKIT_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


def exit_process(code: int) -> NoReturn:
    """End a command line's process with exit status ``code`` once its command has returned.

    The same exit as ``raise SystemExit(code)`` (atexit handlers run, other threads joined, standard streams
    flushed, modules torn down), with every object alive at that moment first moved out of the cyclic garbage
    collector's reach (:func:`gc.freeze`), so that the interpreter's teardown does not walk them again: with
    torch loaded that walk is 0.4-0.6 s of every command, waited for after the result is written (measured
    here: ``python -c "import torch"`` exits in 0.57 s, 0.12 s frozen; the embedded model's ``weights``
    command in 0.56-0.60 s, 0.13-0.17 s frozen). Objects that only a reference cycle keeps alive at exit are
    then not finalised (Python does not promise it either); every file a command writes is closed, and
    renamed into place (:mod:`toolkit.atomic`), before the command returns.

    Only the processes' entry points call it (``python -m toolkit``, ``python -m toolkit.finetune``,
    ``python -m toolkit.lab``, the ``toolkit`` script); ``main(argv)`` called in a kernel returns.

    Raises
    ------
    SystemExit
        Always, with ``code``.
    """
    gc.freeze()
    raise SystemExit(code)


#: How each metric kind is computed on the command line (error messages).
_CLI_COMMANDS = {
    "weight": "python -m toolkit weights MODEL --metrics NAME",
    "diff": "python -m toolkit compare BASE TARGET --metrics NAME "
            "(or: python -m toolkit series CKPT... --metrics NAME)",
}


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


def passed_through(path: str) -> str:
    """How a command line's output path is written when it is no file to replace: ``"stdout"`` for ``-``,
    ``"discard"`` for :data:`os.devnull` (or a link to it), else ``""`` (a file: :mod:`toolkit.atomic`'s one
    writer, which refuses any other device, FIFO, socket or folder)."""
    if path == "-":
        return "stdout"
    if "\x00" not in path and os.path.realpath(path) == os.path.realpath(os.devnull):
        return "discard"
    return ""


def check_output(path: str, option: str, example: str) -> None:
    """Check ``-o`` before any work: ``-`` and ``/dev/null`` are written through, anything else must be a file
    :func:`toolkit.io.check_output_path` accepts (its missing folder announced)."""
    from toolkit.io import check_output_path

    if passed_through(path):
        return
    check_output_path(path, option, example)
    announce_new_folder(path, option)


def write_output(ds, path: str) -> str:
    """Write ``ds`` as NetCDF to ``-o``: to standard output for ``-``, nowhere for ``/dev/null`` (after the
    same encoding checks as a file), else with :func:`toolkit.save`. Returns what to print (on stderr)."""
    import tempfile

    import toolkit
    from toolkit.io import encode_for_netcdf

    how = passed_through(path)
    if how == "discard":
        encode_for_netcdf(ds)  # a Dataset NetCDF cannot store fails as it would for a file
        return f"discarded the NetCDF ({path})"
    if how == "stdout":
        with tempfile.TemporaryDirectory() as folder:
            out = toolkit.save(ds, Path(folder) / "stats.nc")
            sys.stdout.flush()
            sys.stdout.buffer.write(out.read_bytes())
            sys.stdout.buffer.flush()
        return "wrote the NetCDF to standard output"
    toolkit.save(ds, path)
    return f"wrote {path}"


def save_figure(fig, path: str, **savefig) -> None:
    """Write ``fig`` to ``--plot`` (folders created; atomically, through :mod:`toolkit.atomic`'s one writer;
    ``/dev/null`` discards it) and close it; an ``OSError`` becomes an :class:`OutputPathError`."""
    import matplotlib.pyplot as plt

    from toolkit.atomic import atomic_path

    try:
        if passed_through(path) != "discard":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fmt = savefig.pop("format", None) or Path(path).suffix.lstrip(".").lower() or None
            with atomic_path(path) as tmp:
                fig.savefig(tmp, format=fmt, **savefig)
    except OutputPathError:
        raise
    except OSError as e:
        raise OutputPathError(path, f"{e.strerror or e}; choose another path for --plot", e.errno) from e
    finally:
        plt.close(fig)


def cli_message(e: ToolkitError) -> str:
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
