"""Retries and error groups (driver/faults.py) and the error text they key on (errors.py)."""

import pytest

from parallel_steps.control import JobFailed
from parallel_steps.driver.faults import ErrorGroups, RetryPolicy
from parallel_steps.errors import error_line, signature
from parallel_steps.protocol import LossReason, WorkerInfo
from parallel_steps.store.logs import RunLogs

WORKER = WorkerInfo(id="node0/process001", node_index=0, node_id="node0", process_name="process001", slot=0)
TRACEBACK = "Traceback (most recent call last):\n  File \"score.py\", line 3, in run\nKeyError: 'img_0042.png'\n"


def test_error_line_is_a_tracebacks_last_line_else_the_first_line():
    assert error_line(TRACEBACK) == "KeyError: 'img_0042.png'"
    assert error_line("worker exited with exit code 1\nmore detail") == "worker exited with exit code 1"
    assert error_line("  \n") == "unknown error"


def test_signatures_mask_numbers_strings_paths_and_addresses():
    assert signature(TRACEBACK) == signature(TRACEBACK.replace("0042", "0043"))
    assert signature("OSError: cannot open /data/a/b.txt") == signature("OSError: cannot open /data/c.txt")
    assert signature("object at 0x7f3a2b") == signature("object at 0x55aa")
    assert signature("KeyError: 'a'") != signature("ValueError: 'a'")


@pytest.mark.parametrize(
    ("policy", "error", "exit_code", "loss", "retried"),
    [
        ("OnFailure", "ValueError: anything", None, None, True),
        ("Never", "ConnectionResetError: connection reset by peer", None, None, False),
        ("ExitCodeAndErrorMsg", "ValueError: bad row", None, None, False),
        ("ExitCodeAndErrorMsg", "ConnectionError: Connection refused", None, None, True),  # built in
        ("ExitCodeAndErrorMsg", "RuntimeError: CUDA out of memory", None, None, True),
        ("ExitCodeAndErrorMsg", "RuntimeError: quota", None, None, True),  # retryable_errors below
        ("ExitCodeAndErrorMsg", "worker exited", 3, LossReason.CRASHED, True),  # retryable_exit_codes below
        ("ExitCodeAndErrorMsg", "worker exited", 4, LossReason.CRASHED, False),
        ("ExitCodeAndErrorMsg", "run() timed out", None, LossReason.TIMED_OUT, True),
        ("ExitCodeAndErrorMsg", "memory above the limit", None, LossReason.OUT_OF_MEMORY, True),
    ],
)
def test_which_failed_attempts_run_again(policy, error, exit_code, loss, retried):
    retry = RetryPolicy(policy, 3, [r"quota"], [3])
    assert retry.should_retry(1, error, exit_code, loss) is retried


def test_no_attempt_beyond_run_max_try_even_on_failure():
    retry = RetryPolicy("OnFailure", 2, [], [])
    assert retry.should_retry(1, "boom", None)
    assert not retry.should_retry(2, "boom", None)


def test_retryable_errors_are_regexes_matched_without_case():
    retry = RetryPolicy("ExitCodeAndErrorMsg", 5, [r"throttl(ed|ing)"], [])
    assert retry.should_retry(1, "ServiceError: THROTTLED by the store", None)
    assert not retry.should_retry(1, "ServiceError: denied", None)


@pytest.fixture
def logs(tmp_path):
    return RunLogs(tmp_path / "run")


def test_error_groups_count_attempts_by_signature_and_name_where_to_look(logs):
    groups = ErrorGroups(-1, logs)
    groups.add(TRACEBACK, 1, WORKER)
    groups.add(TRACEBACK.replace("0042", "0077"), 2, WORKER)
    groups.add("ValueError: other", 3, WORKER)
    first = groups.first()
    assert first.startswith("First errors: KeyError: 'img_0042.png' (x2, mini-batch 1 on node0/process001 (")
    assert "ValueError: other (x1" in first
    assert "logs/user/error/node0/process001.txt" in groups.summary()


def test_max_same_error_stops_the_job_at_the_nth_mini_batch_with_that_error(logs):
    groups = ErrorGroups(2, logs)
    groups.add(TRACEBACK, 1, WORKER)
    groups.add(TRACEBACK, 1, WORKER)  # a retry of the same mini-batch: still one mini-batch
    with pytest.raises(JobFailed, match="max_same_error 2 reached: the same error failed 2 mini-batches"):
        groups.add(TRACEBACK.replace("0042", "0099"), 5, WORKER)


def test_init_failures_are_grouped_but_never_count_for_max_same_error(logs):
    groups = ErrorGroups(1, logs)
    groups.add("ImportError: no module named x", None, WORKER)
    groups.add("ImportError: no module named x", None, WORKER)
    assert "init() on node0/process001" in groups.summary()


def test_no_errors_say_so(logs):
    groups = ErrorGroups(-1, logs)
    assert groups.first() == ""
    assert groups.summary() == "No errors.\n"
