"""``python -m skbert._cli``: the ``skbert`` command."""

import sys

from skbert._cli._command import run

sys.exit(run())
