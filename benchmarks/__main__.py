"""``python -m benchmarks``: rpn2c specs against hand-written modules (see benchmarks.harness)."""

import sys

from benchmarks.harness import main

sys.exit(main())
