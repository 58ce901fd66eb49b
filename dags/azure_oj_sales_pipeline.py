"""Azure ML's oj-sales parallel pipeline as an Airflow DAG, from its pipeline file as written:
partition_job (a command job: a CSV file partitioned by store and brand into an MLTable folder)
-> parallel_train (a ParallelRunOperator: one model per store and brand).

    python examples/azure/prepare.py     # the pipeline's data
    airflow dags test azure_oj_sales_pipeline -c '{"parallel_train.lagging_orders": "1,2,3"}'

The jobs' literal inputs are DAG params (`<job>.<input>`); params named like configuration fields
(`process_count_per_node`, ...) set the parallel job's fields. PARALLEL_STEPS_AZURE_EXAMPLES names
another copy of examples/azure.
"""

from __future__ import annotations

import os
from pathlib import Path

from parallel_steps.airflow import dag_from_azure_pipeline

EXAMPLES = Path(
    os.environ.get("PARALLEL_STEPS_AZURE_EXAMPLES") or Path(__file__).resolve().parents[1] / "examples" / "azure"
)

dag = dag_from_azure_pipeline(
    EXAMPLES / "pipelines" / "oj_sales" / "pipeline.yml",
    dag_id="azure_oj_sales_pipeline",
    schedule=None,
    catchup=False,
    tags=["parallel-steps", "example", "azure-ml"],
)
