"""parallel-steps: Azure ML ParallelRunStep for Airflow and Prefect.

Names are loaded on first use, so a worker process that only needs
`EntryScript` does not pay for pydantic or pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ParallelRunConfig": "parallel_steps.config",
    "ParallelRunStep": "parallel_steps.parallel_run_step",
    "run_step": "parallel_steps.step",
    "load_job": "parallel_steps.azure.job",
    "FileDataset": "parallel_steps.inputs.datasets",
    "TabularDataset": "parallel_steps.inputs.datasets",
    "EntryScript": "parallel_steps.worker.entry_script",
    "ParallelStepsError": "parallel_steps.errors",
    "ConfigError": "parallel_steps.errors",
    "InputError": "parallel_steps.errors",
    "StepFailed": "parallel_steps.errors",
}

__all__ = [
    "ConfigError",
    "EntryScript",
    "FileDataset",
    "InputError",
    "ParallelRunConfig",
    "ParallelRunStep",
    "ParallelStepsError",
    "StepFailed",
    "TabularDataset",
    "__version__",
    "load_job",
    "run_step",
]

if TYPE_CHECKING:
    from .azure.job import load_job
    from .config import ParallelRunConfig
    from .errors import ConfigError, InputError, ParallelStepsError, StepFailed
    from .inputs.datasets import FileDataset, TabularDataset
    from .parallel_run_step import ParallelRunStep
    from .step import run_step
    from .worker.entry_script import EntryScript


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'parallel_steps' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
