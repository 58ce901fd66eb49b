"""The Azure ML ParallelRunStep samples as one Airflow DAG: prepare -> five parallel steps -> results.

Each step is a `ParallelRunOperator` built from the sample's ParallelRunConfig in pipeline.py,
configured as written for Azure; results reads every output as the Azure notebooks do.

    AIRFLOW__CORE__DAGS_FOLDER=examples/azure airflow dags test azure_ml_samples

Needs the `examples` extra (scikit-learn, pillow) next to `airflow`.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from airflow.sdk import DAG, task

from parallel_steps.airflow import ParallelRunOperator

HERE = Path(__file__).resolve().parent
STEPS = runpy.run_path(str(HERE / "pipeline.py"))["STEPS"]

with DAG(
    dag_id="azure_ml_samples",
    schedule=None,
    catchup=False,
    tags=["parallel-steps", "example", "azure-ml"],
    doc_md=__doc__,
) as dag:

    @task
    def prepare() -> None:
        """Generate the samples' data and models once; later runs find them."""
        runpy.run_path(str(HERE / "prepare.py"))["main"]()

    @task
    def results(summaries: list[dict]) -> dict[str, list[int]]:
        """Each output read back as its notebook reads it: shape -> [rows, columns]."""
        read_output = runpy.run_path(str(HERE / "results.py"))["read_output"]
        return {shape: list(read_output(shape, s["output_file"]).shape) for shape, s in zip(STEPS, summaries)}

    steps = [
        ParallelRunOperator(task_id=shape, parallel_run_config=make(str(HERE / "out" / shape)).config)
        for shape, make in STEPS.items()
    ]
    prepare() >> steps
    results([step.output for step in steps])
