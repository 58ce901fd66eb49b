"""One parallel step mapped over several input folders (dynamic task mapping of whole steps).

make_shards -> count_words[0..2] -> total

- make_shards writes three folders of text files and returns their paths.
- count_words is `ParallelRunOperator.partial(...).expand(inputs=...)`: one task instance per
  folder, each a whole step with its own run directory (.../count_words/<run_id>/<map_index>),
  so the instances never collide and each retry resumes its own step.
- total adds up the mapped run summaries.

    airflow dags test parallel_run_mapped -c '{"mini_batch_size": 5}'
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, task

from parallel_steps.airflow import ParallelRunOperator

ENTRY_SCRIPTS = Path(__file__).resolve().parent / "entry_scripts"

with DAG(
    dag_id="parallel_run_mapped",
    schedule=None,
    catchup=False,
    tags=["parallel-steps", "example"],
    doc_md=__doc__,
):

    @task
    def make_shards(shards: int = 3, files: int = 12) -> list[str]:
        """Write the example folders once (same files, same reuse keys, on every run)."""
        root = Path(os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute() / "example-data" / "shards"
        folders = []
        for shard in range(shards):
            folder = root / f"shard-{shard}"
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(files):
                path = folder / f"doc-{index:03d}.txt"
                if not path.exists():
                    path.write_text(" ".join(f"word{w}" for w in range(shard * 10 + index + 1)) + "\n")
            folders.append(str(folder))
        return folders

    count_words = ParallelRunOperator.partial(
        task_id="count_words",
        entry_script=str(ENTRY_SCRIPTS / "count_words.py"),
        mini_batch_size=4,
        process_count_per_node=2,
        append_row_file_name="word_counts.txt",
    ).expand(inputs=make_shards())

    @task
    def total(summaries: list[dict]) -> dict:
        """Totals over the mapped steps; each summary names its own run directory and output."""
        summaries = list(summaries[:])  # one slice request instead of probing past the end
        result = {
            "steps": len(summaries),
            "files": sum(s["items_succeeded"] for s in summaries),
            "mini_batches": sum(s["mini_batches_total"] for s in summaries),
        }
        for summary in summaries:
            print(f"{summary['run_dir']}: {summary['status']}, output {summary['output_file']}")
        print(result)
        return result

    total(count_words.output)
