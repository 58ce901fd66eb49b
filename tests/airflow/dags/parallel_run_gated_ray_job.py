"""A test DAG (bundle `test-dags`): one deferrable parallel-run task whose step runs as a Ray job and
holds every run() at a gate, a file named by the `gate` param, so a test can stop Airflow while the
job provably runs, then let it finish. The cluster is the Airflow Variable `ray_address`."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from parallel_steps.airflow import ParallelRunOperator

with DAG(
    dag_id="parallel_run_gated_ray_job",
    schedule=None,
    catchup=False,
    params={name: Param("", type="string") for name in ("data", "gate", "started")},
):
    ParallelRunOperator(
        task_id="score",
        entry_script=str(Path(__file__).parent / "scripts" / "gated.py"),
        inputs="{{ params.data }}",
        environment_variables={"GATE": "{{ params.gate }}", "STARTED": "{{ params.started }}"},
        mini_batch_size=2,
        process_count_per_node=2,
        run_invocation_timeout=600,
        allow_reuse=False,
        backend="ray",
        submit_to="ray_job",
        ray_address="{{ var.value.ray_address }}",
        deferrable=True,
    )
