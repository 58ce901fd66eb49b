"""The daily-folder pattern in Prefect: a folder that grows every day is scored in full, and each flow
run runs only what is new (incremental reruns).

    python flows/daily_flow.py --day 2026-11-29
    python flows/daily_flow.py --day 2026-11-30          # runs only the 2026-11-30 files

`land_files` stands in for whatever delivers a day's files into the incoming folder; the
parallel step then covers the whole folder. Each flow run's task run has its own run directory
and finds the previous runs of the same step under the same run root: it keeps their
mini-batches and results, cuts only the new files into new mini-batches, and writes one output
with every file's row. The returned summary counts reused mini-batches and new, changed and
deleted inputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from parallel_steps.prefect import parallel_run
from prefect import flow, task

HERE = Path(__file__).resolve().parent
ENTRY_SCRIPT = HERE.parent / "dags" / "entry_scripts" / "count_words.py"


@task
def land_files(folder: str, day: str, files_per_day: int = 25) -> str:
    """A day's documents join the folder; earlier days' stay."""
    incoming = Path(folder)
    incoming.mkdir(parents=True, exist_ok=True)
    for index in range(files_per_day):
        path = incoming / f"{day}-doc-{index:03d}.txt"
        if not path.exists():
            path.write_text(f"day {day} document {index}\n")
    return str(incoming)


@flow(name="score-daily")
def score_daily(day: str, incoming: str = str(HERE / "data" / "incoming"), output: str | None = None) -> dict:
    """Land `day`'s files in `incoming`, then score the whole folder (only the new files run)."""
    folder = land_files(incoming, day)
    return parallel_run(
        name="score-daily",
        entry_script=str(ENTRY_SCRIPT),
        inputs=folder,
        mini_batch_size=10,
        process_count_per_node=2,
        output=output,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day", required=True, help="the day whose files land, e.g. 2026-11-30")
    args = parser.parse_args()
    summary = score_daily(args.day)
    print(
        f"{summary['mini_batches_reused']} mini-batches reused, {summary['mini_batches_run']} run; "
        f"{summary['inputs_new']} new files; output {summary['output_file']}"
    )
