"""`python -m parallel_steps.cli`, the same as `parallel-steps`."""

from . import console

console()
