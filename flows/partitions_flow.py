"""Partitions and backfills in Prefect: a range of days scored as ONE task run, a materialization per day.

The data is one folder per day (`data/<day>/`). `score-days` runs one `parallel_run` over every day from
`start` to `end` (both included): one pool, one init() per worker, mini-batches that never cross a day,
and each day's output in `<output>/<day>/`. Each day that succeeded is a Prefect asset of its own
(`file:///.../lake/day-counts/2026-01-02`), with that day's facts as the materialization's metadata.

    python flows/partitions_flow.py --start 2026-01-01 --end 2026-01-31   # a backfill: 31 days, one task run
    python flows/partitions_flow.py                                        # yesterday
    python flows/partitions_flow.py serve                                  # a deployment: every day at 03:00

Served, a scheduled run has no parameters: it scores the day before its scheduled time, so each day's
run is that day's partition. A backfill of the same deployment passes the range:

    prefect deployment run score-days/daily -p start=2026-01-01 -p end=2026-01-31

A day whose files fail fails the task run, naming the day; the other days' outputs are written and their
materializations recorded. Rerunning the range runs only the mini-batches whose files changed.
"""

from __future__ import annotations

import argparse
from datetime import date, timedelta
from pathlib import Path

from prefect.runtime import flow_run

from parallel_steps.prefect import parallel_run
from prefect import flow, task

HERE = Path(__file__).resolve().parent
ENTRY_SCRIPT = HERE.parent / "dags" / "entry_scripts" / "count_words.py"
DATA = HERE / "data" / "days"
OUTPUT = HERE / "data" / "lake" / "day-counts"


@task
def land_days(data: str, start: date, end: date, files_per_day: int = 12) -> str:
    """Each day's documents in its own folder (a stand-in for whatever delivers them); files already
    there stay as they are."""
    day = start
    while day <= end:
        folder = Path(data) / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(files_per_day):
            path = folder / f"doc-{index:03d}.txt"
            if not path.exists():
                path.write_text(" ".join([day.isoformat()] * (index + 1)) + "\n")
        day += timedelta(days=1)
    return data


@flow(name="score-days")
def score_days(
    start: date | None = None, end: date | None = None, data: str = str(DATA), output: str = str(OUTPUT)
) -> dict:
    """Count the words of every day's documents from `start` to `end` (default: the day before the run's
    scheduled time) in one step; each day's output is `<output>/<day>/parallel_run_step.txt`."""
    if start is None:
        start = flow_run.scheduled_start_time.date() - timedelta(days=1)
    end = end or start
    root = land_days(data, start, end)
    return parallel_run(
        name="score-days",
        entry_script=str(ENTRY_SCRIPT),
        inputs=f"{root}/{{partition}}/",  # {partition}: each day's key, 2026-01-02
        partitions={"start": start, "end": end},  # every day, both ends included
        output=output,
        mini_batch_size=5,
        process_count_per_node=2,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Score a range of days as one task run, a materialization per day.")
    parser.add_argument("command", nargs="?", choices=["run", "serve"], default="run")
    parser.add_argument("--start", type=date.fromisoformat, help="the first day, e.g. 2026-01-01 (default: yesterday)")
    parser.add_argument("--end", type=date.fromisoformat, help="the last day, included (default: --start)")
    args = parser.parse_args()
    if args.command == "serve":
        score_days.serve(name="daily", cron="0 3 * * *")
    else:
        summary = score_days(args.start, args.end)
        for day, facts in summary["partitions"].items():
            print(
                f"{day}: {facts['status']}, {facts['rows_written']} rows, {facts['mini_batches_run']} mini-batches run"
            )
