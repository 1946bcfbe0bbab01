"""``python -m rpn2c``: the command line."""

import sys

from rpn2c.runtime.cli import main

sys.exit(main())
