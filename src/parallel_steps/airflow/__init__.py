"""The Airflow 3 provider: `ParallelRunOperator`, `@task.parallel_run`, `dag_from_azure_pipeline`, the
`ray_cluster` connection (`RayClusterHook`), the "Run report" link and its plugin, and the provider registration.

`get_provider_info()` is loaded by Airflow's providers manager while Airflow itself is
starting, so this module imports nothing from Airflow; the operator and the decorator load
on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..version import __version__

_EXPORTS = {
    "ParallelRunOperator": "parallel_steps.airflow.operators",
    "RayClusterHook": "parallel_steps.airflow.hooks",
    "parallel_run_task": "parallel_steps.airflow.decorators",
    "dag_from_azure_pipeline": "parallel_steps.airflow.azure_pipeline",
}

__all__ = ["ParallelRunOperator", "RayClusterHook", "dag_from_azure_pipeline", "get_provider_info", "parallel_run_task"]

if TYPE_CHECKING:
    from .azure_pipeline import dag_from_azure_pipeline
    from .decorators import parallel_run_task
    from .hooks import RayClusterHook
    from .operators import ParallelRunOperator


def get_provider_info() -> dict[str, Any]:
    """The provider's description for Airflow's `apache_airflow_provider` entry point."""
    return {
        "package-name": "parallel-steps",
        "name": "parallel-steps",
        "description": "Azure ML ParallelRunStep for Airflow: run an entry script with init() and run() "
        "on mini-batches of files or tables on supervised worker processes or a Ray cluster.",
        "versions": [__version__],
        "integrations": [{"integration-name": "parallel-steps", "tags": ["software"]}],
        "operators": [
            {
                "integration-name": "parallel-steps",
                "python-modules": ["parallel_steps.airflow.operators", "parallel_steps.airflow.azure_pipeline"],
            }
        ],
        "triggers": [{"integration-name": "parallel-steps", "python-modules": ["parallel_steps.airflow.triggers"]}],
        "task-decorators": [
            {"name": "parallel_run", "class-name": "parallel_steps.airflow.decorators.parallel_run_task"}
        ],
        "hooks": [{"integration-name": "parallel-steps", "python-modules": ["parallel_steps.airflow.hooks"]}],
        "connection-types": [
            {
                "connection-type": "ray_cluster",
                "hook-class-name": "parallel_steps.airflow.hooks.RayClusterHook",
                "hook-name": "Ray cluster (parallel-steps)",
            }
        ],
        "extra-links": ["parallel_steps.airflow.links.RunReportLink"],
        "plugins": [{"name": "parallel_steps", "plugin-class": "parallel_steps.airflow.plugin.ParallelStepsPlugin"}],
    }


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'parallel_steps.airflow' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
