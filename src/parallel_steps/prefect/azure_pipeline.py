"""An Azure ML pipeline file as a Prefect flow: one task run per job, in the file's dependency order. A
parallel job is a `parallel_run` task given the job's config, bound in the flow run; a command job is a
task that runs its command as a subprocess. Binding and running belong to the core (`azure/`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.flows import Flow

from prefect import flow, task

from ..azure.engine import Opened, engine_run, pipeline_params
from ..azure.pipeline import read_pipeline
from ..azure.pipeline_run import PipelineOptions, PipelineRun
from ..config import trigger_overrides
from .tasks import parallel_run


def flow_from_azure_pipeline(
    path: str | Path,
    *,
    name: str | None = None,
    params_override: Opened = True,
    datastores: Mapping[str, str] | None = None,
    fields: Mapping[str, Any] | None = None,
    run_root: str | None = None,
) -> Flow[..., dict[str, Any]]:
    """The flow of an Azure ML `type: pipeline` file. Its parameter `inputs` sets pipeline inputs by name
    (jobs' inputs as `<job>.<input>`), within what `params_override` opens; `fields` sets the parallel
    jobs' configuration fields that trigger-time input may change (`process_count_per_node`, ...).

    Args:
        path: the pipeline file.
        name: the flow's name (default: the pipeline's).
        params_override: which inputs a flow run's `inputs` may set: True (literal inputs, to plain
            words), False, "all", or input names.
        datastores: datastore name -> folder or URL, for `azureml://datastores/...` paths.
        fields: configuration fields of every parallel job.
        run_root: where the runs go.

    Returns:
        A flow returning job name -> its result (a parallel job's run summary, a command job's record).

    Example:
        >>> oj_sales = flow_from_azure_pipeline("pipelines/oj_sales/pipeline.yml")
        >>> oj_sales(inputs={"parallel_train.lagging_orders": "1,2,3"})
    """
    file = str(Path(path).absolute())
    pipeline = read_pipeline(file)
    defaults = pipeline_params(pipeline)
    options = PipelineOptions(datastores=dict(datastores or {}), fields=dict(fields or {}), run_root=run_root)

    def run_pipeline(inputs: dict[str, Any] | None = None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        context = FlowRunContext.get()
        run_id = str(context.flow_run.id) if context and context.flow_run else "local"
        run = engine_run(file, inputs or {}, params_override, options, "prefect", pipeline.name, run_id)
        results: dict[str, Any] = {}
        for node in run.pipeline.nodes.values():
            if node.kind == "parallel":
                config = run.parallel_config(node)
                opened = "the flow's author sets it: flow_from_azure_pipeline(..., fields={{'{field}': ...}})"
                results[node.name] = parallel_run(
                    config.with_overrides(**trigger_overrides(fields or {}, True, opened))
                )
            else:
                results[node.name] = _command_job.with_options(name=node.name)(run, node.name)
        return results

    run_pipeline.__doc__ = f"The Azure ML pipeline {path}: jobs {', '.join(pipeline.nodes)}; inputs: {defaults}."
    return flow(run_pipeline, name=name or pipeline.name, validate_parameters=True)


@task(name="command_job", cache_policy=NO_CACHE, persist_result=False)
def _command_job(run: PipelineRun, job: str) -> dict[str, Any]:
    """A pipeline's command job, run as a subprocess; its record (status, outputs)."""
    node = run.pipeline.nodes[job]
    return run.run_job(node)
