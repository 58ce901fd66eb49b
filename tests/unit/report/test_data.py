"""The report's data from a run folder written as the driver writes it: which attempts are read (this
invocation's, whole rows only, in start order) and the series whose order and sums the columns must keep
(the slowest mini-batches, the throughput bins)."""

import csv

import pytest

from parallel_steps.protocol import WorkerInfo
from parallel_steps.report.data import page_data
from parallel_steps.report.records import RunRecords, read_run
from parallel_steps.store.attempts import Attempts
from parallel_steps.store.logs import PROCESSED_COLUMNS, RunLogs

ORIGIN = 1_800_000_000.25  # when this invocation's driver started


def attempt_row(mini_batch, attempt, start_s, duration, outcome="succeeded", items=10, error="", process="process000"):
    """A row of processed_mini-batches.csv as the driver records it (start `start_s` seconds after ORIGIN)."""
    succeeded = items if outcome == "succeeded" else 0
    started = ORIGIN + start_s
    return [
        mini_batch,
        attempt,
        "node0",
        process,
        4242,
        items,
        succeeded,
        0,
        outcome,
        "",
        f"{duration:.3f}",
        error,
        f"{started:.3f}",
    ]


def run_folder(tmp_path, rows, tail=""):
    """A run folder whose driver started at ORIGIN and wrote `rows`, then `tail` (a cut line)."""
    logs = RunLogs(tmp_path)
    logs.record_event({"type": "job_started", "time": ORIGIN})
    logs.close()
    with open(logs.processed, "w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([PROCESSED_COLUMNS, *rows])
        file.write(tail)
    return tmp_path


def records_of(run_dir, attempts) -> RunRecords:
    """Records of `attempts` (mini-batch, attempt, outcome, start, duration) on one worker, in start order."""
    columns = list(zip(*attempts))
    n = len(columns[0])
    read = Attempts(
        mini_batch=list(columns[0]),
        attempt=list(columns[1]),
        worker=["node0/process000"] * n,
        items=[10] * n,
        items_succeeded=[10 if outcome == "succeeded" else 0 for outcome in columns[2]],
        outcome=list(columns[2]),
        start=list(columns[3]),
        duration=list(columns[4]),
        error=["" if outcome == "succeeded" else "ValueError: no" for outcome in columns[2]],
    )
    return RunRecords(run_dir, RunLogs(run_dir, create=False), {}, 0.0, read, [])


def test_this_invocations_whole_rows_are_read_in_start_order(tmp_path):
    rows = [
        attempt_row(0, 1, -30.0, 1.0),  # an earlier invocation's (a resumed run folder)
        attempt_row(2, 1, 0.5, 0.25, process="process001"),
        attempt_row(1, 1, 0.125, 0.5, outcome="failed", items="", error='ValueError: a, "b"\nand more'),
        ["x", 1, "node0", "process000", 1, 10, 10, 0, "succeeded", "", "0.100", "", f"{ORIGIN + 1:.3f}"],
        attempt_row(1, 2, 0.75, 0.5),
    ]
    folder = run_folder(tmp_path, rows, tail="3,1,node0,process000,4242,10,1")  # a driver killed mid-line
    attempts = read_run(folder, {"run_id": "r"}).attempts
    assert attempts == Attempts(
        mini_batch=[1, 2, 1],
        attempt=[1, 1, 2],
        worker=["node0/process000", "node0/process001", "node0/process000"],
        items=[None, 10, 10],
        items_succeeded=[0, 10, 10],
        outcome=["failed", "succeeded", "succeeded"],
        start=[0.125, 0.5, 0.75],
        duration=[0.5, 0.25, 0.5],
        error=['ValueError: a, "b"\nand more', "", ""],
    )
    assert attempts.end == [0.625, 0.75, 1.25]


def test_the_drivers_own_attempts_are_those_the_file_reads_back(tmp_path):
    logs = RunLogs(tmp_path)
    logs.record_event({"type": "job_started", "time": ORIGIN})
    worker = WorkerInfo("node0/process001", 0, "node0", "process001", 1, pid=4242)
    logs.record_attempt(3, 1, worker, 10, 0, 10, "timed_out", ORIGIN + 0.5004, 60.0006, "TimeoutError: 60 s")
    logs.record_attempt(2, 1, worker, None, None, None, "crashed", ORIGIN - 1, 2.0, "worker exited")  # earlier
    logs.record_attempt(3, 2, worker, 10, 10, 0, "succeeded", ORIGIN + 0.0996, 0.1234)
    logs.close()
    from_file = read_run(tmp_path, {"run_id": "r"}).attempts
    assert read_run(tmp_path, {"run_id": "r"}, logs.attempts.columns()).attempts == from_file
    assert (from_file.mini_batch, from_file.start, from_file.duration) == ([3, 3], [0.1, 0.5], [0.123, 60.001])


def test_a_folder_without_attempts_reads_as_none(tmp_path):
    assert read_run(tmp_path, {"run_id": "r"}).attempts == Attempts()


def test_the_slowest_are_each_mini_batchs_longest_attempt_longest_first_equals_in_order(tmp_path):
    records = records_of(
        tmp_path,
        [
            (5, 1, "failed", 0.0, 2.0),
            (6, 1, "succeeded", 2.0, 2.0),
            (5, 2, "succeeded", 4.0, 2.0),  # as long as its first attempt: the first is shown
            (7, 1, "succeeded", 6.0, 3.0),
            (8, 1, "succeeded", 9.0, 1.0),
        ],
    )
    slowest = page_data(records)["slowest"]
    assert [(row["mini_batch"], row["attempt"], row["duration_s"]) for row in slowest] == [
        (7, 1, 3.0),
        (5, 1, 2.0),  # before 6: its first attempt started first
        (6, 1, 2.0),
        (8, 1, 1.0),
    ]


def test_throughput_counts_each_mini_batch_when_it_ended_and_shares_busy_time_between_bins(tmp_path):
    records = records_of(
        tmp_path,
        [
            (0, 1, "succeeded", 0.5, 2.0),  # half of bin 0, all of bin 1, half of bin 2
            (1, 1, "failed", 3.0, 0.5),  # retried: not a finished mini-batch
            (1, 2, "succeeded", 4.0, 0.5),
            (2, 1, "failed", 5.0, 1.0),  # its last attempt: failed for good, when bin 6 begins
            (3, 1, "succeeded", 199.0, 1.0),  # ends at the end of the last bin (200 s: bins of 1 s)
        ],
    )
    throughput = page_data(records)["throughput"]
    assert (throughput["bin_s"], len(throughput["t"])) == (1, 200)
    finished = {b: n for b, n in enumerate(throughput["mini_batches_per_s"]) if n}
    assert finished == {2: 1.0, 4: 1.0, 6: 1.0, 199: 1.0}
    assert {b: n for b, n in enumerate(throughput["items_per_s"]) if n} == {2: 10.0, 4: 10.0, 199: 10.0}
    assert throughput["busy_workers"][:8] == [0.5, 1.0, 0.5, 0.5, 0.5, 1.0, 0.0, 0.0]
    assert throughput["busy_workers"][199] == 1.0


@pytest.mark.parametrize("max_bars", [2, 20_000])
def test_bars_count_every_attempt(tmp_path, max_bars):
    records = records_of(tmp_path, [(i, 1, "succeeded", i * 0.5, 0.5) for i in range(4)])
    bars = page_data(records, max_bars=max_bars)["timeline"]["bars"]
    assert sum(bars["count"]) == sum(bars["items"]) / 10 == 4
    assert bars["end_ms"][-1] == 2000
