"""A test DAG (bundle `test-dags`): one parallel-run task over Parquet tables, whose input and output folders
are the `data` and `out` params, for the OpenLineage test (the provider's file transport)."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from parallel_steps.airflow import ParallelRunOperator

with DAG(
    dag_id="parallel_run_lineage",
    schedule=None,
    catchup=False,
    params={name: Param("", type="string") for name in ("data", "out")},
):
    ParallelRunOperator(
        task_id="double",
        entry_script=str(Path(__file__).parent / "scripts" / "double.py"),
        inputs={"type": "tabular", "path": "{{ params.data }}"},
        output="{{ params.out }}",
        append_row_file_name="doubled.parquet",
        process_count_per_node=1,
        allow_reuse=False,
    )
