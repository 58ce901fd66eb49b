"""The summary type: the same JSON as before it had types (compared with summaries captured from that
code with the same fake clock), still a dict for engines and users, with typed attributes."""

import copy
import json
import pickle
import time
from pathlib import Path

import pytest

from parallel_steps import summary as summary_module
from parallel_steps.summary import TERMINAL, Counters, RunStatus, RunSummary, snapshot, summarize, timestamp

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "summaries.json").read_text())
STARTED, ENDED = 1_700_000_000.0, 1_700_000_100.25


class Clock:
    """The summary module's `time`, stopped at ENDED (formatting as the real one)."""

    strftime, localtime = staticmethod(time.strftime), staticmethod(time.localtime)

    @staticmethod
    def time() -> float:
        return ENDED


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    monkeypatch.setattr(summary_module, "time", Clock)


def expected(name: str) -> dict:
    """The captured summary; its timestamps in this machine's time zone, as `timestamp` writes them."""
    fixture = dict(FIXTURES[name])
    if "started_at" in fixture:
        fixture["started_at"] = timestamp(STARTED)
    if fixture.get("ended_at"):
        fixture["ended_at"] = timestamp(ENDED)
    return fixture


def counters() -> Counters:
    return Counters(
        mini_batches_total=7,
        mini_batches_succeeded=5,
        mini_batches_failed=1,
        mini_batches_reused=2,
        items_total=60,
        items_succeeded=52,
        items_failed=8,
        attempts_retried=3,
        workers_started=4,
        init_failures=1,
        mini_batches_new=5,
        inputs_new=50,
        inputs_changed=1,
        inputs_deleted=2,
    )


def fields() -> RunSummary:
    return RunSummary(
        run_id="score-20240101-000000-abcdef",
        name="score",
        run_dir="/runs/score",
        output="/runs/score/output",
        output_file="/runs/score/output/parallel_run_step.txt",
        append_row_format="text",
        metrics_logged=0,
        shutdown_cut_off=["node0/process001"],
        restarts=[{"time": "t", "reason": "r"}],
        job_result="/runs/score/logs/job_result.txt",
        config={"name": "score", "mini_batch_size": 10},
    )


def same_json(summary: RunSummary, name: str) -> None:
    assert json.dumps(summary) == json.dumps(expected(name))  # the same keys, in the same order, same values


def test_a_final_summary_is_the_json_it_was():
    reason = "8 items in 1 failed mini-batches were within the thresholds."
    same_json(summarize(counters(), RunStatus.SUCCEEDED, reason, STARTED, fields()), "final")


def test_a_running_summary_is_the_json_it_was_with_no_end_time():
    summary = summarize(counters(), RunStatus.RUNNING, "running", STARTED, fields())
    same_json(summary, "running")
    assert summary.ended_at is None


def test_progress_snapshots_are_the_json_they_were():
    same_json(snapshot(counters(), 12.5, 1, 3), "snapshot")
    planning = snapshot(Counters(planning=True, mini_batches_total=3, mini_batches_succeeded=1), 2.0, 2, 0)
    same_json(planning, "planning_snapshot")
    assert planning.eta_s is None  # the plan is still growing: no time left to tell


def test_counts_are_the_json_they_were():
    same_json(counters().counts(), "counts")


def test_a_summary_is_a_plain_json_dict_for_engines_and_users():
    summary = summarize(counters(), RunStatus.FAILED, "error_threshold 0 exceeded", STARTED, fields())
    assert summary["status"] == "Failed"
    assert type(summary["status"]) is str
    assert summary.get("missing") is None
    assert isinstance(dict(summary), dict)
    assert dict(summary) == summary
    assert json.loads(json.dumps(summary)) == summary
    assert pickle.loads(pickle.dumps(summary)) == summary
    assert copy.deepcopy(summary) == summary
    assert repr(summary).startswith("{'status': 'Failed'")


def test_typed_attributes_read_the_keys():
    summary = summarize(counters(), RunStatus.CANCELED, "canceled by the user", STARTED, fields())
    assert summary.status is RunStatus.CANCELED
    assert (summary.items_failed, summary.mini_batches_run, summary.reused) == (8, 4, False)
    assert summary.shutdown_cut_off == ["node0/process001"]
    with pytest.raises(AttributeError, match="this summary has no 'pid'"):
        _ = summary.pid
    with pytest.raises(AttributeError):
        summary.status = RunStatus.FAILED  # keys are written as keys


def test_a_summary_read_back_from_json_has_the_same_attributes():
    written = summarize(counters(), RunStatus.SUCCEEDED, "ok", STARTED, fields())
    read = RunSummary(json.loads(json.dumps(written)))
    assert (read.status, read.run_dir, read.items_total) == (RunStatus.SUCCEEDED, "/runs/score", 60)


def test_run_status_compares_and_serialises_as_its_text():
    assert RunStatus.SUCCEEDED == "Succeeded"
    assert json.dumps(RunStatus.FAILED) == '"Failed"'
    assert {"Canceled": 1}[RunStatus.CANCELED] == 1
    assert "Failed" in TERMINAL
    assert "Running" not in TERMINAL
    assert RunStatus("Queued") is RunStatus.QUEUED


def test_counters_of_an_earlier_summary_are_its_counts():
    earlier = Counters.of({"mini_batches_total": 4, "mini_batches_failed": 1, "items_failed": 2})
    assert (earlier.mini_batches_total, earlier.mini_batches_failed, earlier.items_failed, earlier.done) == (4, 1, 2, 1)
