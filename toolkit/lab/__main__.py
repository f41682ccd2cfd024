"""``python -m toolkit.lab``: run the attention-activation experiment."""

import sys

from toolkit.lab.cli import main

sys.exit(main())
