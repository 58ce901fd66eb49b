"""An Azure ML pipeline file as an Airflow DAG: one task per job, the edges of its `${{parent.jobs...}}`
references, its inputs as DAG params. A parallel job is a `ParallelRunOperator` whose config is the job's,
bound in the DAG run; a command job is a task that runs its command as a subprocess. Binding and
running belong to the core (`azure/`); this only maps them onto Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator, Param
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ..azure.engine import Opened, engine_run, pipeline_params
from ..azure.pipeline import read_pipeline
from ..azure.pipeline_run import PipelineOptions, PipelineRun
from ..config import ParallelRunConfig
from ..errors import ConfigError, InputError, StepFailed
from .operators import ParallelRunOperator


def dag_from_azure_pipeline(
    path: str | Path,
    *,
    dag_id: str | None = None,
    schedule: Any = None,
    params_override: Opened = True,
    datastores: Mapping[str, str] | None = None,
    fields: Mapping[str, Any] | None = None,
    run_root: str | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """The DAG of an Azure ML `type: pipeline` file: a task per job, in the file's dependency order.

    Args:
        path: the pipeline file (read when the DAG file is parsed).
        dag_id: the DAG's id (default: the pipeline's name).
        schedule: as for `DAG`.
        params_override: which pipeline inputs a trigger may set (the DAG params named like them,
            jobs' inputs as `<job>.<input>`): True (literal inputs, to plain words), False, "all",
            or input names (exactly those). Params named like configuration fields override the
            parallel jobs' fields as for `ParallelRunOperator`.
        datastores: datastore name -> folder or URL, for `azureml://datastores/...` paths.
        fields: configuration fields of every parallel job (e.g. `process_count_per_node`).
        run_root: where the runs go (default: the run root of the configuration).
        **dag_kwargs: passed to `DAG` (`catchup`, `tags`, `default_args`, ...).

    Example:
        >>> dag = dag_from_azure_pipeline("pipelines/oj_sales/pipeline.yml", dag_id="oj_sales", schedule="@daily")
    """
    pipeline = read_pipeline(path)
    spec = _PipelineSpec(
        str(Path(path).absolute()), params_override, dict(datastores or {}), dict(fields or {}), run_root
    )
    params = {
        name: Param(value, type=["null", "string", "number", "boolean"])
        for name, value in pipeline_params(pipeline).items()
    }
    dag_kwargs.setdefault("doc_md", f"The Azure ML pipeline `{path}` ({len(pipeline.nodes)} jobs).")
    with DAG(dag_id=dag_id or pipeline.name, schedule=schedule, params=params, **dag_kwargs) as dag:
        tasks: dict[str, BaseOperator] = {}
        for node in pipeline.nodes.values():
            if node.kind == "parallel":
                tasks[node.name] = PipelineParallelJob(task_id=node.name, pipeline=spec, job=node.name)
            else:
                tasks[node.name] = PipelineCommandJob(task_id=node.name, pipeline=spec, job=node.name)
            for upstream in node.upstream:
                tasks[upstream] >> tasks[node.name]
    return dag


class _PipelineSpec:
    """What every task of the DAG needs to bind its job in a DAG run (plain values: it is serialized)."""

    def __init__(
        self, file: str, opened: Opened, datastores: dict[str, str], fields: dict[str, Any], run_root: str | None
    ):
        self.file, self.opened, self.datastores, self.fields, self.run_root = file, opened, datastores, fields, run_root

    def run(self, context: Mapping[str, Any]) -> PipelineRun:
        """This DAG run's pipeline run, with the inputs its params set."""
        ti = context["ti"]
        options = PipelineOptions(datastores=self.datastores, fields=self.fields, run_root=self.run_root)
        try:
            return engine_run(
                self.file, context.get("params") or {}, self.opened, options, "airflow", ti.dag_id, ti.run_id
            )
        except ConfigError as exc:
            raise AirflowFailException(f"invalid pipeline input: {exc}") from None


class PipelineParallelJob(ParallelRunOperator):
    """A pipeline's parallel job: a `ParallelRunOperator` whose config is the job bound in the DAG run."""

    def __init__(self, *, pipeline: _PipelineSpec, job: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline, self.job = pipeline, job

    def build_config(self, context: Mapping[str, Any]) -> ParallelRunConfig:
        """The job's config bound in this DAG run, then the DAG params named like fields (as the operator's)."""
        run = self.pipeline.run(context)
        try:
            config = run.parallel_config(run.pipeline.nodes[self.job])
        except (ConfigError, InputError) as exc:
            raise AirflowFailException(f"invalid configuration: {exc}") from None
        overrides = self._param_overrides(context)
        if overrides:
            self.log.info(
                "DAG params / trigger conf override: %s", ", ".join(sorted(overrides))
            )  # values may be secret
        return config.with_overrides(**overrides)


class PipelineCommandJob(BaseOperator):
    """A pipeline's command job: its command, bound in the DAG run, run as a subprocess."""

    ui_color = "#e8f6f3"

    def __init__(self, *, pipeline: _PipelineSpec, job: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline, self.job = pipeline, job

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        run = self.pipeline.run(context)
        node = run.pipeline.nodes[self.job]
        self.log.info("job %s: %s", self.job, run.command(node)[1])
        try:
            return run.run_job(node)
        except (ConfigError, InputError) as exc:
            raise AirflowFailException(f"invalid configuration: {exc}") from None
        except StepFailed as failed:
            raise AirflowException(f"job {self.job} failed: {failed.summary['status_reason']}") from None
