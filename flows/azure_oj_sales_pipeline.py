"""Azure ML's oj-sales parallel pipeline as a Prefect flow, from its pipeline file as written:
partition_job (a command job: a CSV file partitioned by store and brand into an MLTable folder)
-> parallel_train (a `parallel_run` task: one model per store and brand).

    python examples/azure/prepare.py     # the pipeline's data
    python flows/azure_oj_sales_pipeline.py

The flow's `inputs` parameter sets the jobs' literal inputs (`{"parallel_train.lagging_orders": "1,2,3"}`).
PARALLEL_STEPS_AZURE_EXAMPLES names another copy of examples/azure.
"""

from __future__ import annotations

import os
from pathlib import Path

from parallel_steps.prefect import flow_from_azure_pipeline

EXAMPLES = Path(
    os.environ.get("PARALLEL_STEPS_AZURE_EXAMPLES") or Path(__file__).resolve().parents[1] / "examples" / "azure"
)

oj_sales_pipeline = flow_from_azure_pipeline(
    EXAMPLES / "pipelines" / "oj_sales" / "pipeline.yml", name="azure-oj-sales-pipeline"
)

if __name__ == "__main__":
    for job, result in oj_sales_pipeline().items():
        print(f"{job}: {result['status']}")
