"""Test DAGs (bundle `test-dags`): partition fields that must fail the task at once, in one line, before anything
runs. The input and output folders are the `data` and `out` params.

- parallel_run_partition_key_unset: input and output templated by `{{ dag_run.partition_key }}`, on a DAG whose
  runs have no partition (schedule=None);
- parallel_run_partition_bad_key: `partitions` templated from the `key` param (e.g. `../x`).
"""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from parallel_steps.airflow import ParallelRunOperator

SCRIPT = str(Path(__file__).parent / "scripts" / "names.py")
FOLDERS = {name: Param("", type="string") for name in ("data", "out")}

with DAG(dag_id="parallel_run_partition_key_unset", schedule=None, catchup=False, params=FOLDERS):
    ParallelRunOperator(
        task_id="score",
        entry_script=SCRIPT,
        inputs="{{ params.data }}/{{ dag_run.partition_key }}",
        output="{{ params.out }}/{{ dag_run.partition_key }}",
        process_count_per_node=1,
    )

with DAG(
    dag_id="parallel_run_partition_bad_key",
    schedule=None,
    catchup=False,
    params={**FOLDERS, "key": Param("", type="string")},
):
    ParallelRunOperator(
        task_id="score",
        entry_script=SCRIPT,
        inputs="{{ params.data }}/{partition}",
        partitions=["{{ params.key }}"],
        output="{{ params.out }}",
        process_count_per_node=1,
    )
