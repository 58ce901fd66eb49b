"""The Azure ML ParallelRunStep samples as one Prefect flow: prepare, five parallel steps, results.

    python examples/azure/prefect_flow.py

Each step is a `parallel_run` task given the sample's ParallelRunConfig from pipeline.py,
configured as written for Azure; the flow returns each output's shape as its notebook reads it.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from parallel_steps.prefect import parallel_run
from prefect import flow, task

HERE = Path(__file__).resolve().parent


@task
def prepare() -> None:
    """Generate the samples' data and models once; later runs find them."""
    runpy.run_path(str(HERE / "prepare.py"))["main"]()


@flow(name="azure-ml-samples")
def azure_ml_samples() -> dict[str, list[int]]:
    """Run the five steps one after the other; returns shape -> [rows, columns] of each output."""
    steps = runpy.run_path(str(HERE / "pipeline.py"))["STEPS"]
    read_output = runpy.run_path(str(HERE / "results.py"))["read_output"]
    prepare()
    shapes = {}
    for shape, make in steps.items():
        summary = parallel_run(make(str(HERE / "out" / shape)).config)
        shapes[shape] = list(read_output(shape, summary["output_file"]).shape)
    return shapes


if __name__ == "__main__":
    for shape, (rows, columns) in azure_ml_samples().items():
        print(f"{shape}: {rows} rows x {columns} columns")
