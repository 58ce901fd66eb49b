"""Azure ML SDK v2 (`azure-ai-ml`) objects as step configurations: what `parallel_run_function(...)` builds,
called with its inputs as in a pipeline, and a `@pipeline` job of one parallel job. They are read through
the SDK's own export (`_to_dict()`, what its `dump()` writes as YAML), so that the SDK's model is not
reimplemented here: the export is a pipeline node, read as a pipeline file's is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import ParallelRunConfig
from ..errors import ConfigError
from .job import job_fields
from .pipeline import pipeline_from_data

_WHERE = "parallel_run_config"


def sdk_config(value: Any) -> ParallelRunConfig | None:
    """The configuration of an `azure.ai.ml` parallel job or one-job pipeline; None for any other object."""
    export = getattr(value, "_to_dict", None)
    if not callable(export) or not type(value).__module__.startswith("azure.ai.ml"):
        return None
    data = export()
    if data.get("type") == "pipeline":
        jobs = data.get("jobs") or {}
        if len(jobs) != 1 or next(iter(jobs.values())).get("type") != "parallel":
            raise ConfigError(
                _WHERE,
                f"a pipeline of {len(jobs)} jobs is not one step",
                "write it with dump('pipeline.yml') and run that: parallel-steps run pipeline.yml",
            )
        name, node = next(iter(jobs.items()))
    elif data.get("type") == "parallel":
        name, node = str(data.get("name") or "parallel_job"), data
    else:
        raise ConfigError(
            _WHERE, f"an azure.ai.ml {type(value).__name__} of type {data.get('type')!r} is not a parallel job"
        )
    file = Path.cwd() / "azure-ai-ml"  # the SDK resolved code: already; data paths are relative to the working folder
    pipeline = pipeline_from_data({"type": "pipeline", "jobs": {name: _local(node)}}, file)
    job = pipeline.nodes[name].job
    return ParallelRunConfig.from_dict(job_fields({**job, "name": name}, file))


def _local(node: dict[str, Any]) -> dict[str, Any]:
    """The node with the local data paths the SDK exports as `azureml:./data` given back as `./data`."""
    inputs = {}
    for name, spec in (node.get("inputs") or {}).items():
        path = spec.get("path") if isinstance(spec, dict) else None
        if isinstance(path, str) and path.startswith(("azureml:./", "azureml:../", "azureml:/")):
            spec = {**spec, "path": path.removeprefix("azureml:")}
        inputs[name] = spec
    return {**node, "inputs": inputs}
