"""Score transactions stored as Parquet with a parallel step; flow parameters override the step.

    python flows/tabular_flow.py                         # writes example data on first use
    python flows/tabular_flow.py --mini-batch-size 5 --error-threshold 0

Each Parquet row group is about 10 KB: the default `mini_batch_size` (1MB) makes
one mini-batch per file, a tiny one (e.g. 5 bytes) one per row group. A few
transactions are invalid (negative amounts); they count as failed items, so
`error_threshold=0` fails the step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parallel_steps import ParallelRunConfig, TabularDataset
from parallel_steps.prefect import parallel_run
from prefect import flow, task

HERE = Path(__file__).resolve().parent
DEFAULT_INPUT = str(HERE / "data" / "transactions")

STEP = ParallelRunConfig(
    name="score-transactions",
    entry_script="score.py",
    source_directory=str(HERE / "transactions"),
    output=str(HERE / "out" / "transactions"),
    append_row_file_name="scores.parquet",
    error_threshold=10,
    process_count_per_node=2,
    run_max_try=2,
)

FILES, ROW_GROUPS, ROWS_PER_GROUP, INVALID_PER_FILE = 4, 4, 500, 1


@task
def make_example_data(folder: str) -> str:
    """Write the example transactions: FILES Parquet files of ROW_GROUPS row groups each."""
    root = Path(folder)
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for number in range(FILES):
        rows = ROW_GROUPS * ROWS_PER_GROUP
        amount = rng.gamma(2.0, 120.0, rows).round(2)
        amount[rng.choice(rows, INVALID_PER_FILE, replace=False)] *= -1  # invalid: counted as failed items
        table = pa.table(
            {
                "id": np.arange(number * rows, (number + 1) * rows, dtype=np.int64),
                "customer": [f"c{i:05d}" for i in rng.integers(0, 5000, rows)],
                "amount": amount,
                "n_items": rng.integers(1, 20, rows, dtype=np.int32),
                "country": rng.choice(["DE", "FR", "NL", "US"], rows),
            }
        )
        pq.write_table(table, root / f"part-{number:03d}.parquet", row_group_size=ROWS_PER_GROUP)
    return folder


@flow(name="score-transactions")
def score_transactions(
    input_path: str = DEFAULT_INPUT,
    mini_batch_size: int | str | None = None,
    process_count_per_node: int | None = None,
    error_threshold: int | None = None,
    output: str | None = None,
) -> dict:
    """Score the transactions under `input_path` (a Parquet file, folder or glob).

    Args:
        input_path: the transactions; example data is written there when the path does not exist.
        mini_batch_size: bytes per mini-batch (1024, 512KB, 10MB); default the step's 1MB.
        process_count_per_node: worker processes; default the step's 2.
        error_threshold: invalid transactions tolerated; default the step's 10, -1 tolerates all.
        output: output folder; default flows/out/transactions.
    """
    if not Path(input_path).exists() and not set("*?[") & set(input_path):  # a new folder: example data
        make_example_data(input_path)
    return parallel_run(
        STEP,
        inputs=TabularDataset(input_path),
        mini_batch_size=mini_batch_size,
        process_count_per_node=process_count_per_node,
        error_threshold=error_threshold,
        output=output,
    )


def _arguments() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-path", default=DEFAULT_INPUT)
    parser.add_argument("--mini-batch-size")
    parser.add_argument("--process-count-per-node", type=int)
    parser.add_argument("--error-threshold", type=int)
    parser.add_argument("--output")
    return vars(parser.parse_args())


if __name__ == "__main__":
    summary = score_transactions(**_arguments())
    print(
        f"{summary['status']}: {summary['mini_batches_total']} mini-batches, "
        f"{summary['items_succeeded']} transactions scored, {summary['items_failed']} failed -> "
        f"{summary['output_file']}"
    )
