"""Asset partitions (Airflow 3.3): a parallel step per partition, and one parallel step over many partitions.

One partition per DAG run, rolled up by day:

    parallel_run_hourly_scores   CronPartitionTimetable, hourly, keys 2026-01-01T05 (key_format "%Y-%m-%dT%H")
        score_hour                       inputs  .../readings/hourly/{{ dag_run.partition_key }}
                                         output  .../hourly-scores/{{ dag_run.partition_key }}
                                         outlet  the Asset of .../hourly-scores (declared by the operator);
                                                 Airflow puts the run's key on its event, the extra holds the facts
    parallel_run_daily_rollup    PartitionedAssetTimetable on that Asset, RollupMapper(StartOfDayMapper, DayWindow,
                                 WaitForAll): one run per day (key 2026-01-01) once its 24 hours are in
        rollup                           reads each hour's facts from its event

Many partitions in one task (PartitionedAtRuntime), one run per partition downstream:

    parallel_run_backfill        PartitionedAtRuntime, params start and end (days, both included)
        land_days -> score_days -> score_days_partitions
                                         partitions {"start": ..., "end": ...}: one step, one pool, one init()
                                         per worker, over every day; an asset event per day that succeeded,
                                         its facts in extra["partitions"][day]; score_days_partitions (added by
                                         the operator) fails naming the days that failed
    parallel_run_partition_report PartitionedAssetTimetable on .../daily-scores: one run per day
        report                           reads its own day's facts: extra["partitions"][dag_run.partition_key]

The keys are folder names, and each format is chosen once: the hourly producer writes `%Y-%m-%dT%H` (its
`key_format`, not Airflow's default `%Y-%m-%dT%H:%M:%S`), which is also the folder the hour's readings are in
and the `input_format` of the rollup's StartOfDayMapper; the rollup's keys are `%Y-%m-%d`, like the days of
`partitions={"start", "end"}` (their default format) and the consumer's (IdentityMapper) keys.

    airflow backfill create --dag-id parallel_run_hourly_scores \\
        --from-date 2026-01-01T00:00:00 --to-date 2026-01-01T23:00:00      # 24 runs; then the rollup runs once
    airflow dags trigger parallel_run_backfill -c '{"start": "2026-01-01", "end": "2026-01-30"}'

The readings and the scores go under <run root>/example-data/ (score_hour's pre_execute and land_days write a
partition's readings when its folder is missing; a real DAG finds them in storage).
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import (
    DAG,
    Asset,
    CronPartitionTimetable,
    DayWindow,
    Param,
    PartitionedAssetTimetable,
    PartitionedAtRuntime,
    RollupMapper,
    StartOfDayMapper,
    WaitForAll,
    task,
)

from parallel_steps.airflow import ParallelRunOperator

ENTRY_SCRIPT = Path(__file__).resolve().parent / "entry_scripts" / "score_readings.py"
EXAMPLE_DATA = Path(os.environ.get("PARALLEL_STEPS_HOME") or ".parallel_steps").absolute() / "example-data"
HOURLY_READINGS = EXAMPLE_DATA / "readings" / "hourly"  # <hour>/reading-0.txt ...
DAILY_READINGS = EXAMPLE_DATA / "readings" / "daily"  # <day>/reading-0.txt ...
MODEL_LOADS = EXAMPLE_DATA / "model-loads"  # a file per init() (score_readings.py --model_loads)
HOUR_KEY = "%Y-%m-%dT%H"  # the hourly partitions' keys and folders
HOURLY_OUTPUT = EXAMPLE_DATA / "lake" / "hourly-scores"  # <hour>/parallel_run_step.txt
DAILY_OUTPUT = EXAMPLE_DATA / "lake" / "daily-scores"  # <day>/parallel_run_step.txt
#: The outlets the operators declare: the folder above `{{ dag_run.partition_key }}`, and the output folder.
HOURLY_SCORES, DAILY_SCORES = Asset(uri=HOURLY_OUTPUT.as_uri()), Asset(uri=DAILY_OUTPUT.as_uri())
READINGS_PER_PARTITION = 3


def land(folder: Path, key: str) -> None:
    """A partition's readings, unless its folder is there (a real DAG would find them in storage)."""
    if folder.exists():
        return
    folder.mkdir(parents=True)
    for index in range(READINGS_PER_PARTITION):  # two readings: the file's number, the hour (or the day)
        (folder / f"reading-{index}.txt").write_text(f"{index + 1} {int(key[-2:])}\n")


def local_path(uri: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(uri).path))


# One partition per DAG run, rolled up by day ---------------------------------------------------------


def land_hour(context: Any) -> None:
    """Before the step (`pre_execute`, so that each hour is one task): the hour's readings."""
    key = context["dag_run"].partition_key
    if key is not None:  # without one, the step fails at once naming the field
        land(HOURLY_READINGS / key, key)


with DAG(
    dag_id="parallel_run_hourly_scores",
    schedule=CronPartitionTimetable("0 * * * *", timezone="UTC", key_format=HOUR_KEY),
    catchup=False,
    tags=["parallel-steps", "example", "partitions"],
):
    ParallelRunOperator(
        task_id="score_hour",
        pre_execute=land_hour,
        entry_script=str(ENTRY_SCRIPT),
        inputs=f"{HOURLY_READINGS}/{{{{ dag_run.partition_key }}}}",
        output=f"{HOURLY_OUTPUT}/{{{{ dag_run.partition_key }}}}",  # -> outlets=[HOURLY_SCORES]
        mini_batch_size=2,
        process_count_per_node=1,
    )


with DAG(
    dag_id="parallel_run_daily_rollup",
    schedule=PartitionedAssetTimetable(
        assets=HOURLY_SCORES,
        default_partition_mapper=RollupMapper(
            upstream_mapper=StartOfDayMapper(input_format=HOUR_KEY),  # the producer's key_format
            window=DayWindow(),
            wait_policy=WaitForAll(),  # all 24 hours of the day
        ),
    ),
    catchup=False,
    tags=["parallel-steps", "example", "partitions"],
):

    @task
    def rollup(*, dag_run=None, triggering_asset_events=None) -> dict[str, Any]:
        """The day's total, from each hour's facts: its event's extra names the hour's output file."""
        hours = {event.partition_key: event.extra for event in triggering_asset_events[HOURLY_SCORES]}
        score = 0
        for facts in hours.values():
            lines = local_path(facts["output_file"]).read_text().splitlines()
            score += sum(int(line.rsplit(": ", 1)[1]) for line in lines)
        print(f"day {dag_run.partition_key}: {len(hours)} hours, {score} total score")
        return {
            "day": dag_run.partition_key,
            "hours": sorted(hours),
            "rows": sum(facts["rows_written"] for facts in hours.values()),
            "items_failed": sum(facts["items_failed"] for facts in hours.values()),
            "score": score,
        }

    rollup()


# Many partitions in one task ---------------------------------------------------------------------------

with DAG(
    dag_id="parallel_run_backfill",
    schedule=PartitionedAtRuntime(),
    catchup=False,
    params={
        "start": Param("2026-01-01", type="string", format="date", description="first day"),
        "end": Param("2026-01-30", type="string", format="date", description="last day (included)"),
    },
    tags=["parallel-steps", "example", "partitions"],
):

    @task
    def land_days(*, params=None) -> None:
        first, last = date.fromisoformat(params["start"]), date.fromisoformat(params["end"])
        for offset in range((last - first).days + 1):
            day = (first + timedelta(days=offset)).isoformat()
            land(DAILY_READINGS / day, day)

    land_days() >> ParallelRunOperator(
        task_id="score_days",
        entry_script=str(ENTRY_SCRIPT),
        arguments=["--model_loads", str(MODEL_LOADS)],
        inputs=f"{DAILY_READINGS}/{{partition}}",
        partitions={"start": "{{ params.start }}", "end": "{{ params.end }}"},  # every day, both included
        output=str(DAILY_OUTPUT),  # -> outlets=[DAILY_SCORES]; each day's output in <output>/<day>/
        mini_batch_size=2,
        process_count_per_node=2,
    )  # and, added by the operator: score_days >> score_days_partitions (fails naming the days that failed)


with DAG(
    dag_id="parallel_run_partition_report",
    schedule=PartitionedAssetTimetable(assets=DAILY_SCORES),  # one run per day that succeeded
    catchup=False,
    tags=["parallel-steps", "example", "partitions"],
):

    @task
    def report(*, dag_run=None, triggering_asset_events=None) -> dict[str, Any]:
        """This day's facts: every event of the step's run shares one extra, each day's facts under its key."""
        extra = triggering_asset_events[DAILY_SCORES][-1].extra
        facts = extra["partitions"][dag_run.partition_key]
        print(f"day {dag_run.partition_key} of run {extra['run_id']}: {facts}")
        return {"day": dag_run.partition_key, "run_id": extra["run_id"], **facts}

    report()
