"""``python -m toolkit.finetune``."""

import sys

from toolkit.finetune.cli import main

sys.exit(main())
