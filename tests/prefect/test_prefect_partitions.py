"""A step over partitions in real flow runs (issue 49): the example flow `flows/partitions_flow.py` scores a
range of days as one task run and materializes each day's output folder, with that day's facts; a day that
fails fails the task run naming it while the other days' materializations reach the server; a bad partition
given as a flow parameter fails before anything runs. Events are read back from the suite's Prefect server.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from prefect_helpers import events_of, flow_run_id, table, task_states, wait_for

from parallel_steps.errors import ConfigError
from parallel_steps.prefect import ParallelRunFailed, parallel_run
from prefect import flow

SUCCEEDED = "prefect.asset.materialization.succeeded"
DAYS = ("2026-01-01", "2026-01-02", "2026-01-03")
FILES_PER_DAY = 12  # land_days' default; mini_batch_size 5: mini-batches of 5, 5 and 2 files per day


@pytest.fixture
def score_days(example_flows, tmp_path):
    """The example flow over this test's folder: `score(start, end)` returns its final state."""
    import partitions_flow

    def score(start: str, end: str):
        return partitions_flow.score_days(
            start=date.fromisoformat(start),
            end=date.fromisoformat(end),
            data=str(tmp_path / "days"),
            output=str(tmp_path / "lake" / "day-counts"),
            return_state=True,
        )

    return score


def day_asset(tmp_path: Path, day: str) -> str:
    return (tmp_path / "lake" / "day-counts" / day).as_uri()


def materializations(tmp_path: Path, day: str, count: int = 1) -> list:
    """The day's materialization events once `count` have reached the server, the latest first."""
    found = wait_for(lambda: len(events := events_of(day_asset(tmp_path, day), SUCCEEDED)) >= count and events, 60)
    assert len(found) == count
    return found


def flow_run_ended(state, name: str) -> None:
    """Events reach the server in the order they were emitted: once the flow run's end is there, every asset
    event the task run emitted before it is too."""
    resource = f"prefect.flow-run.{flow_run_id(state)}"
    wait_for(lambda: events_of(resource, f"prefect.flow-run.{name}"), 60, "the flow run's end")


def test_a_range_is_one_task_run_with_a_materialization_per_partition(score_days, tmp_path):
    state = score_days(DAYS[0], DAYS[-1])
    summary = state.result()
    assert summary["status"] == "Succeeded"
    states = task_states(flow_run_id(state))
    assert states.pop("score-days") == "Completed"  # one task run for the range; land_days' is the other
    assert len(states) == 1
    task_run_id = summary["run_id"].removeprefix("score-days-")

    for day in DAYS:
        (event,) = materializations(tmp_path, day)
        output_file = tmp_path / "lake" / "day-counts" / day / "parallel_run_step.txt"
        assert event.payload == {
            "partition": day,
            "run_id": summary["run_id"],
            "status": "Succeeded",
            "status_reason": "succeeded",
            "mini_batches_total": 3,
            "mini_batches_succeeded": 3,
            "mini_batches_failed": 0,
            "mini_batches_reused": 0,
            "mini_batches_run": 3,
            "items_total": FILES_PER_DAY,
            "items_succeeded": FILES_PER_DAY,
            "items_failed": 0,
            "items_without_result": 0,
            "rows_written": FILES_PER_DAY,
            "output_file": output_file.as_uri(),
            "report": summary["report"],
        }
        assert len(output_file.read_text().splitlines()) == FILES_PER_DAY
        related = {(resource.id, resource.role) for resource in event.related}
        assert {rid for rid, role in related if role == "asset"} == {(tmp_path / "days" / day).as_uri()}  # its own
        assert ("parallel-steps", "asset-materialized-by") in related
        assert f"prefect.task-run.{task_run_id}" in {rid for rid, _ in related}  # as Prefect's own events
        assert events_of((tmp_path / "days" / day).as_uri(), "prefect.asset.referenced")
    flow_run_ended(state, "Completed")
    assert events_of((tmp_path / "lake" / "day-counts").as_uri()) == []  # the days are the assets, not the root

    # one day's file changes: the rerun runs that mini-batch only, and records every day again
    (tmp_path / "days" / DAYS[1] / "doc-000.txt").write_text("changed\n")
    rerun = score_days(DAYS[0], DAYS[-1]).result()
    assert {day: facts["mini_batches_run"] for day, facts in rerun["partitions"].items()} == {
        DAYS[0]: 0,
        DAYS[1]: 1,
        DAYS[2]: 0,
    }
    for day in DAYS:
        latest = materializations(tmp_path, day, count=2)[0]
        assert (latest.payload["run_id"], latest.payload["mini_batches_reused"]) == (
            rerun["run_id"],
            rerun["partitions"][day]["mini_batches_reused"],
        )


def test_a_failed_partition_fails_the_task_run_naming_it_and_the_others_are_materialized(score_days, tmp_path):
    broken = tmp_path / "days" / DAYS[1] / "doc-003.txt"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"\xff\xfe not utf-8\n")  # count_words cannot read it: that mini-batch fails
    state = score_days(DAYS[0], DAYS[-1])

    assert state.is_failed()
    with pytest.raises(ParallelRunFailed) as raised:
        state.result()
    message = str(raised.value)
    assert f"1 of 3 partitions failed ({DAYS[1]}: 1 of 3 mini-batches failed: UnicodeDecodeError" in message
    assert f"failed partitions: {DAYS[1]} (see " in message
    assert raised.value.summary["partitions_failed"] == [DAYS[1]]
    assert task_states(flow_run_id(state))["score-days"] == "Failed"
    rows = table(flow_run_id(state), "score-days-partitions")  # the failed partition first
    assert [(row["partition"], row["status"], row["mini_batches_failed"]) for row in rows] == [
        (DAYS[1], "Failed", 1),
        (DAYS[0], "Succeeded", 0),
        (DAYS[2], "Succeeded", 0),
    ]

    for day in (DAYS[0], DAYS[2]):
        (event,) = materializations(tmp_path, day)
        assert (event.payload["partition"], event.payload["status"]) == (day, "Succeeded")
    flow_run_ended(state, "Failed")
    assert events_of(day_asset(tmp_path, DAYS[1])) == []  # no materialization, succeeded or failed
    assert not (tmp_path / "lake" / "day-counts" / DAYS[1]).exists()


@flow
def backfill(partitions: list[str], data: str, entry_script: str):
    return parallel_run(
        name="backfill", entry_script=entry_script, inputs=f"{data}/{{partition}}/", partitions=partitions
    )


def test_a_bad_partition_key_or_an_empty_range_fails_before_anything_runs(score_days, make_files, tmp_path):
    make_files(2, folder=f"days/{DAYS[0]}")
    script = Path(__file__).resolve().parents[2] / "dags" / "entry_scripts" / "count_words.py"
    cases = [
        (
            backfill(["../x"], str(tmp_path / "days"), str(script), return_state=True),
            "partitions: '../x' is not a partition key: one folder name",
        ),
        (score_days(DAYS[-1], DAYS[0]), f"partitions: the range {DAYS[-1]} .. {DAYS[0]} is empty (end before start)"),
    ]
    for state, line in cases:
        assert state.is_failed()
        with pytest.raises(ConfigError) as raised:
            state.result()
        assert str(raised.value).startswith(line)
        assert "\n" not in str(raised.value)
    assert list((tmp_path / "runs").glob("*")) == []  # no run directory: nothing ran
