"""The daily-folder pattern: a folder that grows every day is scored in full every day, and each run
runs only what is new (incremental reruns).

land_files -> score_incoming

- land_files stands in for whatever delivers today's files: it adds `files_per_day` documents
  (named by the run's logical date) to one incoming folder, which keeps the earlier days' files.
- score_incoming is a ParallelRunOperator over the whole folder. Every DAG run has its own run
  directory, and finds yesterday's run of the same step under the same run root: it keeps
  yesterday's mini-batches (and their results), cuts only today's files into new mini-batches,
  and writes one output with every file's row, old and new. The summary says how many
  mini-batches were reused and how many inputs were new, changed or deleted.

    airflow dags test parallel_run_daily 2026-11-29
    airflow dags test parallel_run_daily 2026-11-30     # runs only the 2026-11-30 files

The folder is $PARALLEL_STEPS_INCOMING, else <run root>/example-data/incoming.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from parallel_steps.airflow import ParallelRunOperator

ENTRY_SCRIPTS = Path(__file__).resolve().parent / "entry_scripts"


def incoming_folder() -> Path:
    run_root = Path(os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute()
    return Path(os.environ.get("PARALLEL_STEPS_INCOMING") or run_root / "example-data" / "incoming")


with DAG(
    dag_id="parallel_run_daily",
    schedule="@daily",
    catchup=False,
    tags=["parallel-steps", "example"],
    doc_md=__doc__,
):

    @task
    def land_files(ds: str | None = None, files_per_day: int = 25) -> str:
        """Today's documents join the folder; earlier days' stay (a real DAG would sync them from storage)."""
        folder = incoming_folder()
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(files_per_day):
            path = folder / f"{ds}-doc-{index:03d}.txt"
            if not path.exists():
                path.write_text(f"day {ds} document {index}\n")
        return str(folder)

    ParallelRunOperator(
        task_id="score_incoming",
        entry_script=str(ENTRY_SCRIPTS / "count_words.py"),
        inputs=land_files(),
        mini_batch_size=10,
        process_count_per_node=2,
    )
