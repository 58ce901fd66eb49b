"""One step's run, in this process: the checks before anything is written, the plan, reuse, the workers
and their resource monitor, and `run_step`, which drives them through the driver and assembles the output.
"""

from .plan import mini_batches, preview
from .step import reuse_key, run_step

__all__ = ["mini_batches", "preview", "reuse_key", "run_step"]
