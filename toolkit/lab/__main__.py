"""``python -m toolkit.lab``: run the attention-activation experiment."""

from toolkit.cli.base import exit_process
from toolkit.lab.cli import main

exit_process(main())
