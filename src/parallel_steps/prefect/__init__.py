"""Prefect 3 integration: `parallel_run`, a task that runs a parallel step inside a flow.

Install with `pip install "parallel-steps[prefect]"`. See docs/prefect.md.
"""

from ..errors import WriteRefused
from .azure_pipeline import flow_from_azure_pipeline
from .blocks import RayCluster
from .cache import STEP_REUSE, StepReuse
from .parameters import step_config
from .tasks import ParallelRunFailed, parallel_run, parallel_run_async

__all__ = [
    "STEP_REUSE",
    "ParallelRunFailed",
    "RayCluster",
    "StepReuse",
    "WriteRefused",
    "flow_from_azure_pipeline",
    "parallel_run",
    "parallel_run_async",
    "step_config",
]
