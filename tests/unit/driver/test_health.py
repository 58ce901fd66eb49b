"""Job health (driver/health.py) against fake counters and a fake clock: the thresholds, ParallelRunStep's
init() policy and the timeouts that end a job making no progress."""

import dataclasses

import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.config.sections import Thresholds
from parallel_steps.control import JobFailed
from parallel_steps.driver import health
from parallel_steps.driver.faults import ErrorGroups
from parallel_steps.driver.health import JobHealth, threshold_breach
from parallel_steps.protocol import WorkerInfo
from parallel_steps.store.logs import RunLogs
from parallel_steps.summary import Counters


def counts(total=10, succeeded=0, failed=0, items_failed=0, planning=False) -> Counters:
    return Counters(
        mini_batches_total=total,
        mini_batches_succeeded=succeeded,
        mini_batches_failed=failed,
        items_failed=items_failed,
        planning=planning,
    )


def test_nothing_breached_with_the_defaults_whatever_failed():
    assert threshold_breach(Thresholds(), counts(failed=10, items_failed=100)) is None


@pytest.mark.parametrize(
    ("limits", "counters", "reason"),
    [
        (Thresholds(error_threshold=3), counts(items_failed=4), "error_threshold 3 exceeded: 4 items failed"),
        (Thresholds(mini_batch_error_threshold=1), counts(failed=2), "mini_batch_error_threshold 1 exceeded"),
        (Thresholds(allowed_failed_count=0), counts(failed=1), "allowed_failed_count 0 exceeded"),
        (Thresholds(allowed_failed_percent=10), counts(failed=2), "allowed_failed_percent 10 exceeded: 2 of 10"),
        (
            Thresholds(max_tolerated_failure_rate=0.2),
            counts(succeeded=7, failed=3),
            "max_tolerated_failure_rate 0.2 exceeded: 3 of 10 finished",
        ),
    ],
)
def test_each_threshold_names_itself_and_the_counts_that_broke_it(limits, counters, reason):
    assert threshold_breach(limits, counters).startswith(reason)


def test_thresholds_at_their_limit_are_not_exceeded():
    assert threshold_breach(Thresholds(error_threshold=4, mini_batch_error_threshold=2), counts(2, 0, 2, 4)) is None


def test_allowed_failed_percent_waits_for_the_complete_plan():
    streaming = counts(total=2, failed=1, planning=True)
    assert threshold_breach(Thresholds(allowed_failed_percent=10), streaming) is None
    assert threshold_breach(Thresholds(allowed_failed_percent=10), dataclasses.replace(streaming, planning=False))


def test_the_failure_rate_needs_ten_finished_mini_batches():
    assert threshold_breach(Thresholds(max_tolerated_failure_rate=0.1), counts(succeeded=4, failed=5)) is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(health, "time", clock)
    return clock


def worker(node: int, slot: int) -> WorkerInfo:
    name = f"process{slot + 1:03d}"
    return WorkerInfo(id=f"node{node}/{name}", node_index=node, node_id=f"node{node}", process_name=name, slot=slot)


@pytest.fixture
def make_health(tmp_path, clock):
    def make(nodes: int = 1, per_node: int = 2, **fields) -> JobHealth:
        policy = ParallelRunConfig(**fields).driver_policy()
        errors = ErrorGroups(policy.thresholds.max_same_error, RunLogs(tmp_path / "run"))
        job = JobHealth(policy, Counters(mini_batches_total=10), errors, nodes, per_node)
        job.workers_starting()
        return job

    return make


def test_every_worker_started_is_counted(make_health):
    job = make_health(nodes=2, per_node=3)
    assert job.counters.workers_started == 6
    job.worker_replaced(worker(0, 1))
    assert job.counters.workers_started == 7


def test_a_node_stops_starting_workers_after_three_init_failures_per_slot(make_health):
    job = make_health(nodes=2, per_node=1)
    assert job.init_failed(worker(0, 0), "ImportError: x")
    assert job.init_failed(worker(0, 0), "ImportError: x")
    assert not job.init_failed(worker(0, 0), "ImportError: x")  # 3 x process_count_per_node
    assert job.node_stopped(0)
    assert not job.node_stopped(1)


def test_the_job_fails_when_init_fails_everywhere(make_health):
    job = make_health(nodes=1, per_node=1)
    job.init_failed(worker(0, 0), "ImportError: x")
    job.init_failed(worker(0, 0), "ImportError: x")
    with pytest.raises(JobFailed, match="init\\(\\) failed 3 times on every node; no worker could start"):
        job.init_failed(worker(0, 0), "ImportError: no module named x")


def test_workers_stuck_in_init_fail_the_job_after_three_run_timeouts_and_30_s(make_health, clock):
    job = make_health(run_invocation_timeout=10)
    clock.now += 60
    job.check()
    clock.now += 0.5  # 3 x 10 + 30 = 60 s passed
    with pytest.raises(JobFailed, match="every worker has been in init\\(\\) for more than 60 s"):
        job.check()


def test_no_first_task_within_first_task_creation_timeout_fails_the_job(make_health, clock):
    job = make_health(first_task_creation_timeout=5)
    job.worker_ready(worker(0, 0))
    clock.now += 6
    with pytest.raises(JobFailed, match="first_task_creation_timeout 5 s"):
        job.check()


def test_no_completion_within_progress_update_timeout_looks_hung(make_health, clock):
    job = make_health(progress_update_timeout=50)
    job.worker_ready(worker(0, 0))
    job.dispatched()
    clock.now += 49
    job.completed()
    clock.now += 49
    job.check()
    clock.now += 2
    with pytest.raises(JobFailed, match="no mini-batch completed for 50 s"):
        job.check()


def test_a_mini_batch_given_more_time_by_the_script_is_exempt_until_its_attempt_ends(make_health, clock):
    job = make_health(progress_update_timeout=50)
    busy = worker(0, 0)
    job.worker_ready(busy)
    job.dispatched()
    job.exempt(busy, None)  # the script set no limit for its current run()
    clock.now += 500
    job.check()
    job.attempt_ended(busy)
    with pytest.raises(JobFailed, match="looks hung"):
        job.check()


def test_hang_detection_off_never_fails_for_lack_of_progress(make_health, clock):
    job = make_health(hang_detection=False, progress_update_timeout=1)
    job.worker_ready(worker(0, 0))
    job.dispatched()
    clock.now += 1000
    job.check()


def test_check_thresholds_adds_the_first_errors_to_the_reason(make_health):
    job = make_health(error_threshold=0)
    job.errors.add("ValueError: bad row", 3, worker(0, 0))
    job.counters.items_failed = 1
    with pytest.raises(JobFailed, match=r"error_threshold 0 exceeded: 1 items failed\. First errors: ValueError"):
        job.check_thresholds()
