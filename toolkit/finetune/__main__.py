"""``python -m toolkit.finetune``."""

from toolkit.cli.base import exit_process
from toolkit.finetune.cli import main

exit_process(main())
