"""A test DAG (bundle `test-dags`): a deferrable parallel-run task whose step runs as a Ray job on the cluster
of the `ray_test` connection (a `ray_cluster` connection: address and token), over the `data` param's files."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, Param

from parallel_steps.airflow import ParallelRunOperator

with DAG(dag_id="parallel_run_ray_conn", schedule=None, catchup=False, params={"data": Param("", type="string")}):
    ParallelRunOperator(
        task_id="score",
        entry_script=str(Path(__file__).parent / "scripts" / "names.py"),
        inputs="{{ params.data }}",
        mini_batch_size=2,
        process_count_per_node=2,
        allow_reuse=False,
        backend="ray",
        submit_to="ray_job",
        ray_conn_id="ray_test",
        deferrable=True,
    )
