"""parallel-steps: Azure ML ParallelRunStep for Airflow and Prefect.

Names are loaded on first use, so a worker process that only needs
`EntryScript` does not pay for pydantic or pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config.loaders import register_config_loader as _register_config_loader
from .config.loaders import register_job_reader as _register_job_reader
from .version import __version__
from .worker.hooks import register_worker_hook as _register_worker_hook

_EXPORTS = {
    "ParallelRunConfig": "parallel_steps.config",
    "ParallelRunStep": "parallel_steps.parallel_run_step",
    "run_step": "parallel_steps.run.step",
    "load_job": "parallel_steps.config",
    "FileDataset": "parallel_steps.inputs.datasets",
    "TabularDataset": "parallel_steps.inputs.datasets",
    "EntryScript": "parallel_steps.worker.entry_script",
    "ParallelStepsError": "parallel_steps.errors",
    "ConfigError": "parallel_steps.errors",
    "InputError": "parallel_steps.errors",
    "StepFailed": "parallel_steps.errors",
    "WriteRefused": "parallel_steps.errors",
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
    "WriteRefused",
    "__version__",
    "load_job",
    "run_step",
]

# The composition root: the Azure ML layer sets up what entry scripts import (azureml.core, models)
# in every worker (the core only calls the hooks registered here; every worker imports this first)...
_register_worker_hook("parallel_steps.azure.worker_hook:AzureMLWorkerHook")
# ...reads v2 job files (`ParallelRunConfig.from_yaml`, `load_job`, the CLI), and azure-ai-ml job objects given
# as a ParallelRunStep's parallel_run_config.
_register_job_reader("parallel_steps.azure.job:job_fields")
_register_config_loader("parallel_steps.azure.sdk_objects:sdk_config")

if TYPE_CHECKING:
    from .config.model import ParallelRunConfig, load_job
    from .errors import ConfigError, InputError, ParallelStepsError, StepFailed, WriteRefused
    from .inputs.datasets import FileDataset, TabularDataset
    from .parallel_run_step import ParallelRunStep
    from .run.step import run_step
    from .worker.entry_script import EntryScript


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'parallel_steps' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
