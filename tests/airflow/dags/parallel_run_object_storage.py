"""A test DAG (bundle `test-dags`): steps that read from and write to S3 through the Airflow connection
`ps_moto` (the test defines it as AIRFLOW_CONN_PS_MOTO): one names its data by `ObjectStoragePath`s, the
other by plain URLs and a `storage_options` entry naming the connection."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG, ObjectStoragePath

from parallel_steps.airflow import ParallelRunOperator

SCRIPT = str(Path(__file__).parent / "scripts" / "labelled.py")
COMMON = {"mini_batch_size": 2, "process_count_per_node": 2, "allow_reuse": False, "entry_script": SCRIPT}

with DAG(dag_id="parallel_run_object_storage", schedule=None, catchup=False):
    ParallelRunOperator(
        task_id="score_paths",
        inputs=ObjectStoragePath("s3://ps_moto@ps-airflow/images/"),
        side_inputs={"labels": ObjectStoragePath("s3://ps_moto@ps-airflow/labels.txt")},
        arguments=["--labels", "${side_inputs.labels}"],
        output=ObjectStoragePath("s3://ps_moto@ps-airflow/scores/paths"),
        **COMMON,
    )
    ParallelRunOperator(
        task_id="score_urls",
        inputs="s3://ps-airflow/images/",
        side_inputs={"labels": "s3://ps-airflow/labels.txt"},
        arguments=["--labels", "${side_inputs.labels}"],
        output="s3://ps-airflow/scores/urls",
        storage_options={"s3://ps-airflow": {"conn_id": "ps_moto"}},
        **COMMON,
    )
