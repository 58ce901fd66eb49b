"""`python -m parallel_steps.cli`, the same as `parallel-steps`."""

import sys

from . import main

sys.exit(main())
