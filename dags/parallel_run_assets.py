"""Data-aware scheduling: one DAG counts words with a parallel step, another is scheduled on its output.

parallel_run_word_counts:  make_documents -> count_words    (outlet: the Asset of the output folder)
parallel_run_word_totals:  schedule=[that Asset] -> total   (reads the run's facts from the asset event)

The step declares its output folder as an outlet Asset by itself (no `outlets=` needed). When it
succeeds, the asset event's extra holds the run's facts: run_id, rows_written, mini_batches_run,
mini_batches_reused, mini_batches_failed and the output_file's URI; a reused run emits the event too.
The second DAG runs after each successful run of the first and reads them from `inlet_events`.

    airflow dags test parallel_run_word_counts
    airflow dags test parallel_run_word_totals     # with a scheduler, it runs by itself after the first

The documents and the counts go under <run root>/example-data/.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from pathlib import Path

from airflow.sdk import DAG, Asset, task

from parallel_steps.airflow import ParallelRunOperator

ENTRY_SCRIPTS = Path(__file__).resolve().parent / "entry_scripts"
EXAMPLE_DATA = Path(os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute() / "example-data"
COUNTS_FOLDER = EXAMPLE_DATA / "lake" / "word-counts"
#: The same URI the step derives from its `output` (a folder's file:// URI).
WORD_COUNTS = Asset(uri=COUNTS_FOLDER.as_uri())

with DAG(dag_id="parallel_run_word_counts", schedule=None, catchup=False, tags=["parallel-steps", "example"]):

    @task
    def make_documents(count: int = 40) -> str:
        """Documents to count (a real DAG would find them in storage)."""
        folder = EXAMPLE_DATA / "documents"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            (folder / f"doc-{index:03d}.txt").write_text(" ".join(["word"] * (index + 1)) + "\n")
        return str(folder)

    ParallelRunOperator(
        task_id="count_words",
        entry_script=str(ENTRY_SCRIPTS / "count_words.py"),
        inputs=make_documents(),
        output=str(COUNTS_FOLDER),  # -> outlets=[WORD_COUNTS]
        mini_batch_size=10,
        process_count_per_node=2,
    )


with DAG(dag_id="parallel_run_word_totals", schedule=[WORD_COUNTS], catchup=False, tags=["parallel-steps", "example"]):

    @task(inlets=[WORD_COUNTS])
    def total(*, inlet_events=None) -> dict:
        """Total the latest counts, from the run the asset event names."""
        facts = inlet_events[WORD_COUNTS][-1].extra
        output = Path(urllib.request.url2pathname(urllib.parse.urlsplit(facts["output_file"]).path))
        words = sum(int(line.rsplit(": ", 1)[1]) for line in output.read_text().splitlines())
        print(f"run {facts['run_id']}: {facts['rows_written']} documents, {words} words")
        return {"run_id": facts["run_id"], "documents": facts["rows_written"], "words": words}

    total()
