"""Command line: ``python -m toolkit weights MODEL -o out.nc --plot out.png`` (also the ``toolkit`` script).

:mod:`toolkit.cli.commands` holds the commands and the parser;
:mod:`toolkit.cli.base` what every command line of the toolkit shares (the
finetune and lab command lines import it too).
"""

from toolkit.cli.base import Parser, exit_process, run_command
from toolkit.cli.commands import build_parser, main, run

__all__ = ["Parser", "build_parser", "exit_process", "main", "run", "run_command"]
