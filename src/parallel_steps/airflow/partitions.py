"""Airflow's asset partitions (AIP-76) and a parallel step.

Two ways in, both documented in docs/airflow.md "Partitions and backfills":

- **One partition per DAG run** (`CronPartitionTimetable`, `PartitionedAssetTimetable`): the fields name the run's
  partition through Airflow's templating (`inputs="/data/{{ dag_run.partition_key }}/"`), and Airflow puts the
  run's key on the outlet's event. An output templated that way (`output="/scores/{{ dag_run.partition_key }}"`)
  declares the folder above the partition as the outlet Asset.
- **Many partitions in one task** (`partitions=`, `PartitionedAtRuntime`): one step over every partition, and
  an event per partition that succeeded, all carrying the same `extra` (Airflow 3.3 sends one extra with every
  key of `add_partitions`), so each partition's facts are in it under its key. Airflow sends outlet events
  only when the task succeeds: a step whose partitions partly failed lets the task succeed, so the others'
  events reach Airflow, and its `<task_id>_partitions` check task (added beside it) fails naming them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from logging import Logger
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from ..errors import StepFailed
from ..report.lineage import locate
from ..summary import RunSummary

_PARTITION_KEY = re.compile(r"\{\{\s*(?:dag_run\.)?partition_key\s*\}\}")
_PARTITION_OUTPUT = re.compile(r"(?P<folder>[^{}]+?)/*\{\{\s*(?:dag_run\.)?partition_key\s*\}\}/*")
#: A partition's facts in its event's extra (the rest of its counts are in the step's summary, in XCom).
_FACTS = ("items_total", "items_failed", "rows_written", "mini_batches_run", "mini_batches_reused", "output_file")


def names_partition_key(value: Any) -> bool:
    """Whether a field's value (a template, also nested) names the DAG run's partition key."""
    if isinstance(value, str):
        return bool(_PARTITION_KEY.search(value))
    if isinstance(value, Mapping):
        return any(names_partition_key(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(names_partition_key(v) for v in value)
    return False


def partition_output_folder(output: Any) -> str | None:
    """The folder of an output templated by the DAG run's partition alone (`/scores/{{ dag_run.partition_key }}`):
    the outlet Asset the run's partition events belong to. None for any other output."""
    match = _PARTITION_OUTPUT.fullmatch(output) if isinstance(output, str) else None
    return match.group("folder") if match else None


def check_partition_key(fields: list[str], context: Mapping[str, Any]) -> None:
    """Fields whose templates name the partition key need a DAG run that has one; else nothing runs."""
    dag_run = context.get("dag_run")
    if fields and getattr(dag_run, "partition_key", None) is None:
        raise AirflowFailException(
            f"invalid configuration: {fields[0]}: the template names the DAG run's partition_key, but DAG run "
            f"{getattr(dag_run, 'run_id', '?')} has no partition (schedule the DAG with a CronPartitionTimetable "
            "or PartitionedAssetTimetable, or trigger it with a partition key)"
        )


def unless_partly_failed(run: Callable[[], RunSummary], log: Logger, task_id: str) -> RunSummary:
    """The summary of `run`, also when it fails as a step over partitions some of which succeeded (their outputs
    are written): the task then succeeds, so that their events are sent, and its check task fails naming the
    others. Any other failure is raised."""
    try:
        return run()
    except StepFailed as exc:
        partitions, failed = exc.summary.get("partitions"), exc.summary.get("partitions_failed") or []
        if not partitions or len(failed) == len(partitions):
            raise
        log.error("%s; task %s_partitions fails naming them", exc.summary["status_reason"], task_id)
        return exc.summary


def partition_events(summary: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The keys of the partitions that succeeded, and each one's facts by key, for the events' extra."""
    partitions: Mapping[str, Mapping[str, Any]] = summary.get("partitions") or {}
    failed = set(summary.get("partitions_failed") or [])
    succeeded = [key for key in partitions if key not in failed]
    facts = {key: {fact: partitions[key].get(fact) for fact in _FACTS} for key in succeeded}
    for each in facts.values():  # a URI, as the run's own output_file in the extra (run_facts)
        each["output_file"] = locate(each["output_file"]).uri if each["output_file"] else None
    return succeeded, facts


class PartitionsCheckOperator(BaseOperator):
    """Fails, naming them, when the parallel step `step_task_id` reported partitions that failed; the step's
    task itself succeeded so that the other partitions' asset events were sent.

    Args:
        step_task_id: the `ParallelRunOperator` (or `@task.parallel_run`) task whose summary it reads.
    """

    ui_color = "#f5cba7"

    def __init__(self, *, step_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_task_id = step_task_id

    def execute(self, context: Mapping[str, Any]) -> list[str]:
        summary = RunSummary(context["ti"].xcom_pull(task_ids=self.step_task_id) or {})
        failed = summary.get("partitions_failed") or []
        if failed:
            raise AirflowFailException(
                f"parallel step {summary.get('name')}: {summary.get('status_reason')} "
                f"(run directory {summary.get('run_dir')}; clearing {self.step_task_id} runs only what failed)"
            )
        self.log.info("%d partitions succeeded", len(summary.get("partitions") or {}))
        return list(summary.get("partitions") or {})


def add_partitions_check(step: BaseOperator, task_id: str) -> None:
    """Put a `PartitionsCheckOperator` after `step` (named `<task_id>_partitions`, in the same DAG and group)."""
    check = PartitionsCheckOperator(
        task_id=f"{task_id}_partitions", step_task_id=step.task_id, dag=step.dag, task_group=step.task_group
    )
    step >> check
