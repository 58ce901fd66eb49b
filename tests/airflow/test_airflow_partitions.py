"""Airflow 3.3's asset partitions with a parallel step, in the suite's running Airflow (deployment.py), with the
example DAGs of dags/parallel_run_partitions.py:

- an hourly producer (`CronPartitionTimetable`, input and output templated by `{{ dag_run.partition_key }}`),
  run for each hour of one day (24 runs triggered with their partition key through the REST API), and a daily
  rollup (`RollupMapper` of `StartOfDayMapper`, `WaitForAll`) that runs once, when all 24 hours are in, and
  reads each hour's facts from its event;
- one task over 30 daily partitions (`partitions=`, `PartitionedAtRuntime`): one init() per worker,
  mini-batches by size inside each partition, an asset event per partition with its own facts, read by a
  consumer that runs once per partition; then a rerun after one partition's input changed runs only that
  partition's mini-batch, a partition whose script fails lets the 29 others' events through while the
  added check task fails naming it, and clearing the task once it is fixed runs only its failed mini-batch.

And, through `dag.test()`, the bad inputs that fail the task at once, in one line, with nothing written; and the
Airflow guide's copy of the example DAGs.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from deployment import Deployment, deployed, wait_for, wait_for_dags

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "parallel_run_partitions.py"
TEST_DAGS = Path(__file__).resolve().parent / "dags" / "parallel_run_partition_errors.py"
HOURLY, ROLLUP = "parallel_run_hourly_scores", "parallel_run_daily_rollup"
BACKFILL, REPORT = "parallel_run_backfill", "parallel_run_partition_report"
USER = "trigger"
DAY = "2026-01-01"
HOURS = [f"{DAY}T{hour:02d}" for hour in range(24)]
DAYS = [(date(2026, 1, 1) + timedelta(days=n)).isoformat() for n in range(30)]  # the example's default range
READINGS = 3  # files per partition (the example's land()); mini_batch_size 2 cuts them into 2 mini-batches


@deployed
def _link_the_example(home: Path) -> None:
    """The example file, linked into the bundle without a team (it finds its entry script beside the target)."""
    (home / "bundles" / "dags" / EXAMPLE.name).symlink_to(EXAMPLE)


@pytest.fixture(scope="module")
def airflow(airflow_deployment) -> Deployment:
    wait_for_dags(airflow_deployment, USER, HOURLY, ROLLUP, BACKFILL, REPORT)
    return airflow_deployment


@pytest.fixture
def excused_process(airflow_deployment):
    """Airflow's own processes outlive each test; the session fixture stops them and checks for leftovers."""
    return lambda process, before: process.name().startswith("airflow")


# The REST API, as the tests read it -------------------------------------------------------------------


def get(airflow: Deployment, path: str, **params: Any) -> Any:
    response = airflow.client(USER).get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def dag_runs(airflow: Deployment, dag_id: str) -> list[dict[str, Any]]:
    return get(airflow, f"/api/v2/dags/{dag_id}/dagRuns", limit=100)["dag_runs"]


def events_of(airflow: Deployment, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """The asset events a DAG run's tasks emitted (each with its partition_key), through the REST API."""
    found = get(airflow, "/api/v2/assets/events", source_dag_id=dag_id, source_run_id=run_id, limit=100)
    return found["asset_events"]


def xcom(airflow: Deployment, dag_id: str, run_id: str, task_id: str) -> Any:
    response = airflow.xcom(USER, dag_id, run_id, task_id)
    assert response.status_code == 200, response.text
    return response.json()["value"]


def task_state(airflow: Deployment, dag_id: str, run_id: str, task_id: str) -> str:
    return get(airflow, f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["state"]


def task_errors(airflow: Deployment, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
    """The exceptions in a task's log (its first try), through the task-instance log endpoint."""
    response = airflow.client(USER).get(
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1",
        params={"full_content": True},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    return [error for event in response.json()["content"] for error in event.get("error_detail") or []]


def finished_runs(airflow: Deployment, dag_id: str, keys: list[str]) -> list[dict[str, Any]]:
    """Wait until the DAG's runs of these partitions have all ended; they, by partition key. (Any other run, such
    as the hourly DAG's scheduled run of the current hour, is left out.)"""

    def ended() -> list[dict[str, Any]] | None:
        runs = [run for run in dag_runs(airflow, dag_id) if run["partition_key"] in keys]
        assert len(runs) <= len(keys), [run["partition_key"] for run in runs]  # never two runs of a partition
        done = len(runs) == len(keys) and all(run["state"] in ("success", "failed") for run in runs)
        return runs if done else None

    runs = wait_for(f"the runs of {dag_id} over {keys[0]} .. {keys[-1]} to end", ended, airflow.components)
    return sorted(runs, key=lambda run: run["partition_key"])


def local(uri: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(uri).path))


def scores(folder: Path) -> int:
    """What score_readings.py makes of a partition's readings: twice their sum."""
    return sum(2 * sum(int(n) for n in path.read_text().split()) for path in folder.glob("reading-*.txt"))


# One partition per DAG run, rolled up by day ----------------------------------------------------------


def test_a_day_of_hourly_partitions_rolls_up_once_and_the_rollup_reads_each_hours_facts(airflow):
    for hour in HOURS:  # what `airflow backfill create` does, without its scheduled run of the current hour after
        response = airflow.client(USER).post(
            f"/api/v2/dags/{HOURLY}/dagRuns", json={"logical_date": None, "partition_key": hour}
        )
        assert response.status_code == 200, response.text

    hourly = finished_runs(airflow, HOURLY, HOURS)
    assert [(run["partition_key"], run["state"]) for run in hourly] == [(hour, "success") for hour in HOURS]
    (rollup,) = finished_runs(airflow, ROLLUP, [DAY])  # once, for the day, when all 24 hours were in
    assert (rollup["partition_key"], rollup["state"]) == (DAY, "success"), airflow.components.logs()

    # Each hour's step read its own folder and wrote its own; its event carries its key and its facts.
    readings, outputs = airflow.runs / "example-data" / "readings" / "hourly", airflow.runs / "example-data" / "lake"
    created = []
    for run in hourly:
        (event,) = events_of(airflow, HOURLY, run["dag_run_id"])
        hour, facts = event["partition_key"], event["extra"]
        assert (hour, event["uri"]) == (run["partition_key"], (outputs / "hourly-scores").as_uri())
        assert (facts["rows_written"], facts["items_failed"]) == (READINGS, 0)
        assert local(facts["output_file"]) == outputs / "hourly-scores" / hour / "parallel_run_step.txt"
        created += [dag_run["run_id"] for dag_run in event["created_dagruns"]]
    assert created == [rollup["dag_run_id"]] * 24  # the one rollup run consumed every hour's event

    total = xcom(airflow, ROLLUP, rollup["dag_run_id"], "rollup")
    assert total == {
        "day": DAY,
        "hours": HOURS,
        "rows": 24 * READINGS,
        "items_failed": 0,
        "score": sum(scores(readings / hour) for hour in HOURS),
    }


# Many partitions in one task ----------------------------------------------------------------------------


def test_one_task_over_30_days_emits_an_event_per_day_reruns_only_what_changed_and_reports_a_failed_day(airflow):
    data, loads = airflow.runs / "example-data" / "readings" / "daily", airflow.runs / "example-data" / "model-loads"
    output = airflow.runs / "example-data" / "lake" / "daily-scores"

    # 1. Thirty days in one step: one pool, one init() per worker, mini-batches of 2 inside each day.
    first = airflow.trigger(USER, BACKFILL)
    assert airflow.finished(USER, BACKFILL, first) == "success", airflow.components.logs()
    summary = xcom(airflow, BACKFILL, first, "score_days")
    partitions = summary["partitions"]
    assert list(partitions) == DAYS
    assert {day: p["mini_batches_total"] for day, p in partitions.items()} == dict.fromkeys(DAYS, 2)
    assert summary["mini_batches_total"] == 60
    # One model load per worker (process_count_per_node=2), not one per day (a worker still starting when the
    # other had run every mini-batch is stopped before its init() runs).
    assert 1 <= len(list(loads.iterdir())) <= summary["workers_started"] <= 2
    assert summary["partitions_failed"] == []

    # The consumer ran once per day (an event's consumer runs must have started before the events endpoint
    # lists it: Airflow 3.3.2 answers 500 for an event whose run is still queued).
    reports = finished_runs(airflow, REPORT, DAYS)
    assert [(run["partition_key"], run["state"]) for run in reports] == [(day, "success") for day in DAYS]

    events = {event["partition_key"]: event for event in events_of(airflow, BACKFILL, first)}
    assert sorted(events) == DAYS
    for day, event in events.items():
        facts = event["extra"]["partitions"][day]
        assert facts == {
            "items_total": READINGS,
            "items_failed": 0,
            "rows_written": READINGS,
            "mini_batches_run": 2,
            "mini_batches_reused": 0,
            "output_file": (output / day / "parallel_run_step.txt").as_uri(),
        }
        rows = local(facts["output_file"]).read_text().splitlines()
        assert sorted(row.split(":")[0] for row in rows) == [f"{day}/reading-{n}.txt" for n in range(READINGS)]

    for run in reports:  # and read that day's facts, under its key in the extra every event of the run shares
        day = run["partition_key"]
        facts = events[day]["extra"]["partitions"][day]
        assert xcom(airflow, REPORT, run["dag_run_id"], "report") == {"day": day, "run_id": summary["run_id"], **facts}
    paused = airflow.client(USER).patch(f"/api/v2/dags/{REPORT}", json={"is_paused": True})  # 30 runs are enough
    assert paused.status_code == 200, paused.text

    # 2. One day's readings change: the next run over the same range runs only that day's changed mini-batch.
    changed = DAYS[6]
    (data / changed / "reading-0.txt").write_text("7 7\n")
    second = airflow.trigger(USER, BACKFILL)
    assert airflow.finished(USER, BACKFILL, second) == "success", airflow.components.logs()
    rerun = xcom(airflow, BACKFILL, second, "score_days")["partitions"]
    assert {day: p["mini_batches_run"] for day, p in rerun.items()} == {day: int(day == changed) for day in DAYS}
    assert {day: p["mini_batches_reused"] for day, p in rerun.items()} == {day: 2 - int(day == changed) for day in DAYS}
    again = {event["partition_key"]: event["extra"]["partitions"] for event in events_of(airflow, BACKFILL, second)}
    assert sorted(again) == DAYS  # a reused day is delivered again, so its event is sent again
    assert {day: facts[day]["mini_batches_run"] for day, facts in again.items()} == {d: int(d == changed) for d in DAYS}
    assert f"{changed}/reading-0.txt: 28" in (output / changed / "parallel_run_step.txt").read_text()

    # 3. One day's script fails: the task succeeds so the 29 others' events reach Airflow; the check fails.
    failing = DAYS[12]
    (data / failing / "reading-2.txt").write_text("fail\n")
    third = airflow.trigger(USER, BACKFILL)
    assert airflow.finished(USER, BACKFILL, third) == "failed"
    assert task_state(airflow, BACKFILL, third, "score_days") == "success"
    assert task_state(airflow, BACKFILL, third, "score_days_partitions") == "failed"
    sent = sorted(event["partition_key"] for event in events_of(airflow, BACKFILL, third))
    assert sent == [day for day in DAYS if day != failing]
    result = xcom(airflow, BACKFILL, third, "score_days")
    assert (result["status"], result["partitions_failed"]) == ("Failed", [failing])
    assert result["partitions"][failing]["output_file"] is None
    errors = task_errors(airflow, BACKFILL, third, "score_days_partitions")
    assert [error["exc_type"] for error in errors] == ["AirflowFailException"], json.dumps(errors, indent=1)
    message = errors[0]["exc_value"]
    assert f"1 of 30 partitions failed ({failing}: 1 of 2 mini-batches failed: " in message
    assert "reading-2.txt: a reading is not a number" in message
    assert "clearing score_days runs only what failed" in message

    # 4. The day's readings fixed, clearing the task runs only its failed mini-batch, and every day is sent again.
    (data / failing / "reading-2.txt").write_text("3 13\n")
    cleared = airflow.client(USER).post(
        f"/api/v2/dags/{BACKFILL}/clearTaskInstances",
        json={
            "dry_run": False,
            "only_failed": False,
            "dag_run_id": third,
            "task_ids": ["score_days"],
            "include_downstream": True,
        },
    )
    assert cleared.status_code == 200, cleared.text
    assert airflow.finished(USER, BACKFILL, third) == "success", airflow.components.logs()
    resumed = xcom(airflow, BACKFILL, third, "score_days")
    assert (resumed["status"], resumed["partitions_failed"]) == ("Succeeded", [])
    assert {day: p["mini_batches_run"] for day, p in resumed["partitions"].items()} == {
        day: int(day == failing) for day in DAYS
    }
    sent_twice = sorted(event["partition_key"] for event in events_of(airflow, BACKFILL, third))
    assert sent_twice == sorted([*sent, *DAYS])  # the first try's 29, then all 30


# Bad input: the task fails at once, in one line naming the field, and nothing runs ------------------------


def failures(log: str) -> list[str]:
    """The errors the tasks failed with, as the log shows them (each once)."""
    mark = "AirflowFailException: "
    return sorted({line[line.index(mark) + len(mark) :] for line in log.splitlines() if mark in line})


def test_a_template_naming_the_partition_key_fails_at_once_on_a_dag_run_without_a_partition(dag_test, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "None").mkdir(parents=True)  # what the template renders to without a partition: it would run
    (data / "None" / "a.txt").write_text("a\n")

    run = dag_test("parallel_run_partition_key_unset", {"data": str(data), "out": str(out)}, file=TEST_DAGS)

    assert run.returncode != 0
    assert failures(run.log) == [
        f"invalid configuration: inputs: the template names the DAG run's partition_key, but DAG run {run.run_id} "
        "has no partition (schedule the DAG with a CronPartitionTimetable or PartitionedAssetTimetable, "
        "or trigger it with a partition key)"
    ]
    assert not out.exists()
    assert not (tmp_path / "runs").exists()  # no run directory: the step never started


def test_a_partition_key_leaving_the_input_folder_fails_at_once(dag_test, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    (tmp_path / "x").mkdir()  # where ../x would lead
    (tmp_path / "x" / "a.txt").write_text("a\n")

    run = dag_test(
        "parallel_run_partition_bad_key", {"data": str(data), "out": str(out), "key": "../x"}, file=TEST_DAGS
    )

    assert run.returncode != 0
    assert failures(run.log) == [
        "invalid configuration: partitions: '../x' is not a partition key: one folder name of at most 250 "
        "characters, without / or \\, not . or .."
    ]
    assert not out.exists()
    assert not (tmp_path / "runs").exists()


def test_an_empty_range_of_partitions_fails_at_once(dag_test, tmp_path):
    run = dag_test(BACKFILL, {"start": "2026-01-05", "end": "2026-01-01"}, file=EXAMPLE)

    assert run.returncode != 0
    assert failures(run.log) == [
        "invalid configuration: partitions: the range 2026-01-05 .. 2026-01-01 is empty (end before start)"
    ]
    example_data = tmp_path / "runs" / "example-data"
    assert not (example_data / "lake").exists()
    assert not (example_data / "model-loads").exists()  # no worker started, no model loaded
    assert not (tmp_path / "runs" / "airflow").exists()  # no run directory


def test_the_airflow_guide_shows_the_example_dags_as_they_are():
    """docs/airflow.md "Partitions and backfills" shows dags/parallel_run_partitions.py whole, in two blocks."""
    guide = (EXAMPLE.parents[1] / "docs" / "airflow.md").read_text()
    section = guide[guide.index("## Partitions and backfills") : guide.index("### Backfills as one step")]
    shown = [block.split("\n", 1)[1] for block in section.split("```")[1::2] if block.startswith("python\n")]
    source = EXAMPLE.read_text()
    code = source[source.index('"""', 3) + 3 :]  # without the module docstring

    def lines(text: str) -> list[str]:  # without blank lines and the file's section rulers
        return [line for line in text.splitlines() if line.strip() and not line.endswith("-----")]

    assert lines("".join(shown)) == lines(code)
