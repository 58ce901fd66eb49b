"""Tabular scoring of Parquet files with `@task.parallel_run`, tuned from the trigger form.

make_data -> score -> report

- make_data writes example transactions as Parquet files (a few rows lack an amount:
  scoring drops them, so they count as failed items) and returns the tabular input.
- score is the decorated function: it is the step's run(mini_batch), gets a pandas
  DataFrame and returns one scored row per good input row; init= runs once per worker.
- report prints the counts from the run summary.

The Params below are wired into the step with templates ("{{ params.x }}"); the strings are
coerced by the config's rules. A small error_threshold makes the step fail on the bad rows:

    airflow dags test parallel_run_tabular -c '{"mini_batch_size": 5, "error_threshold": 1}'
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, Param, task

# Filled by init() in each worker; run() reads it (shipped with the functions by cloudpickle).
_model: dict[str, float] = {}


def load_model() -> None:
    """The step's init(): a fixed linear model standing in for one loaded from storage."""
    _model.update(bias=-1.5, amount=0.004, online=0.8)


def data_folder() -> Path:
    """Where the example data goes: next to the run directories (PARALLEL_STEPS_HOME)."""
    root = os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps"
    return Path(root).absolute() / "example-data" / "transactions"


with DAG(
    dag_id="parallel_run_tabular",
    schedule=None,
    catchup=False,
    tags=["parallel-steps", "example"],
    doc_md=__doc__,
    params={
        "mini_batch_size": Param(
            "32KB",
            type=["string", "integer"],
            description="Bytes of Parquet per mini-batch: 1024, 32KB, 1MB (row groups are never split).",
        ),
        "process_count_per_node": Param(2, type="integer", minimum=1, description="Worker processes."),
        "error_threshold": Param(
            5, type="integer", minimum=-1, description="Failed rows tolerated before the step fails; -1 ignores them."
        ),
    },
):

    @task
    def make_data(files: int = 4, rows: int = 2500) -> dict:
        """Write the example Parquet files once (same data, same reuse key, on every run)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = data_folder()
        if not (folder / f"part-{files - 1:02d}.parquet").exists():
            folder.mkdir(parents=True, exist_ok=True)
            rng = np.random.default_rng(7)
            for index in range(files):
                amount = rng.gamma(2.0, 150.0, rows).round(2)
                missing = [
                    None if (index, row) in {(0, 17), (1, 1200), (3, 2499)} else float(value)
                    for row, value in enumerate(amount)
                ]
                table = pa.table(
                    {
                        "id": np.arange(rows) + index * rows,
                        "amount": pa.array(missing, pa.float64()),
                        "online": rng.integers(0, 2, rows).astype(bool),
                    }
                )
                temporary = folder / f".part-{index:02d}.parquet"
                pq.write_table(table, temporary, row_group_size=500)
                temporary.rename(folder / f"part-{index:02d}.parquet")
        return {"type": "tabular", "path": str(folder / "*.parquet")}

    @task.parallel_run(
        init=load_model,
        mini_batch_size="{{ params.mini_batch_size }}",
        process_count_per_node="{{ params.process_count_per_node }}",
        error_threshold="{{ params.error_threshold }}",
        append_row_file_name="scores.parquet",
        run_invocation_timeout=120,
    )
    def score(mini_batch):
        """Score each transaction; rows without an amount are dropped and count as failed."""
        import numpy as np

        rows = mini_batch.dropna(subset=["amount"])
        logit = _model["bias"] + _model["amount"] * rows["amount"] + _model["online"] * rows["online"]
        return rows[["id"]].assign(score=(1 / (1 + np.exp(-logit))).round(4))

    @task
    def report(summary: dict) -> dict:
        """Print what the step did; the summary is small (counts and paths), never the data."""
        import pyarrow.parquet as pq

        rows = pq.read_metadata(summary["output_file"]).num_rows
        print(
            f"{summary['status']}: {rows} scored rows in {summary['output_file']}; "
            f"{summary['items_failed']} rows failed; {summary['mini_batches_total']} mini-batches "
            f"(reused: {summary['reused']})"
        )
        return {"rows": rows, "items_failed": summary["items_failed"]}

    report(score(inputs=make_data()))
