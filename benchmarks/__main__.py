"""``python -m benchmarks {speed,memory,parity,learning,gpu} [options]``: see :mod:`benchmarks.suite`."""

import sys

from .suite import main

sys.exit(main())
