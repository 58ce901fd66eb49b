"""The follower against a fake status source: what is retried, when it returns, progress relayed once
per snapshot, cancel once; and `finished`, the end every front end maps to its engine."""

from __future__ import annotations

import asyncio

import pytest

from parallel_steps.errors import ConfigError, ParallelStepsError, StepFailed
from parallel_steps.jobs.follow import Follower, RunHooks, finished, when_set

RUNNING = {"run_id": "r", "status": "Running", "mini_batches_done": 1, "mini_batches_total": 4, "elapsed_s": 1.0}
SUCCEEDED = {"run_id": "r", "status": "Succeeded", "status_reason": "every mini-batch succeeded"}


class Source:
    """A run's statuses in turn (an exception is raised as the Jobs API would), and the cancels asked."""

    def __init__(self, *answers):
        self.answers, self.reads, self.cancels = list(answers), 0, []
        self.cancel_error: Exception | None = None

    def read(self, run, run_root):
        self.reads += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    def cancel(self, run, run_root, reason):
        self.cancels.append(reason)
        if self.cancel_error:
            raise self.cancel_error


class Seen(RunHooks):
    def __init__(self):
        self.snapshots, self.warnings = [], []

    def progress(self, snapshot):
        self.snapshots.append(dict(snapshot))

    def warn(self, message):
        self.warnings.append(message)


def follower(source: Source, hooks: RunHooks | None = None, **kwargs) -> Follower:
    return Follower("run-dir", hooks, interval=0, read=source.read, request_cancel=source.cancel, **kwargs)


class TestRetryPolicy:
    def test_a_status_that_cannot_be_read_is_retried_with_one_warning_each_time(self):
        hiccup = ParallelStepsError("the Ray Jobs API did not answer about job j: 502 Bad Gateway")
        source, hooks = Source(hiccup, hiccup, SUCCEEDED), Seen()
        assert follower(source, hooks).wait()["status"] == "Succeeded"
        assert source.reads == 3
        assert hooks.warnings == [f"cannot read the run's status now ({hiccup}); trying again"] * 2

    def test_without_retry_the_error_is_raised(self):
        source = Source(ParallelStepsError("no answer"), SUCCEEDED)
        with pytest.raises(ParallelStepsError, match="no answer"):
            follower(source, retry=False).wait()

    def test_any_parallel_steps_error_counts_as_unreadable_but_other_errors_are_bugs(self):
        source = Source(ConfigError("ray_address", "cannot use the Ray Jobs API"), SUCCEEDED)
        assert follower(source).wait()["status"] == "Succeeded"
        with pytest.raises(KeyError):
            follower(Source(KeyError("status"))).wait()

    def test_an_unknown_job_is_an_end_not_a_retry(self):
        """run_status turns a Ray 404 into a Failed run: the follower returns it at once."""
        unknown = {"run_id": "r", "status": "Failed", "status_reason": "the Ray job j is unknown to the cluster"}
        source = Source(unknown, SUCCEEDED)
        assert follower(source).wait()["status"] == "Failed"
        assert source.reads == 1


class TestWaiting:
    def test_waits_through_queued_and_running_to_the_end(self):
        source = Source({"run_id": "r", "status": "Queued"}, RUNNING, SUCCEEDED)
        assert follower(source).wait() == SUCCEEDED
        assert source.reads == 3

    def test_each_new_snapshot_goes_to_the_hooks_once(self):
        later = {**RUNNING, "mini_batches_done": 3, "elapsed_s": 2.0}
        source, hooks = Source(RUNNING, RUNNING, later, SUCCEEDED), Seen()
        follower(source, hooks).wait()
        assert [s["mini_batches_done"] for s in hooks.snapshots] == [1, 3]

    def test_a_status_without_a_snapshot_is_not_progress(self):
        source, hooks = Source({"run_id": "r", "status": "Queued"}, SUCCEEDED), Seen()
        follower(source, hooks).wait()
        assert hooks.snapshots == []

    def test_a_timeout_names_the_run_and_its_status(self):
        with pytest.raises(TimeoutError, match=r"^run r is still Running after -1 s$"):
            follower(Source(RUNNING)).wait(timeout=-1)

    def test_the_async_wait_follows_the_same_policy(self):
        hiccup = ParallelStepsError("502")
        source, hooks = Source(hiccup, RUNNING, SUCCEEDED), Seen()
        summary = asyncio.run(follower(source, hooks).wait_async())
        assert summary["status"] == "Succeeded"
        assert len(hooks.warnings) == 1
        assert len(hooks.snapshots) == 1


class TestCancel:
    def test_a_stop_reason_cancels_the_run_once_however_many_polls_see_it(self):
        source = Source(RUNNING, RUNNING, RUNNING, {**SUCCEEDED, "status": "Canceled"})
        asked = []

        def stop():
            asked.append(1)
            return "canceled by the user (SIGINT)"

        assert follower(source).wait(stop)["status"] == "Canceled"
        assert source.cancels == ["canceled by the user (SIGINT)"]
        assert len(asked) == 1  # not asked again once canceled

    def test_no_stop_reason_no_cancel(self):
        source = Source(RUNNING, SUCCEEDED)
        follower(source).wait(lambda: None)
        assert source.cancels == []

    def test_cancel_called_directly_and_by_a_stop_reason_asks_once(self):
        source = Source(RUNNING, SUCCEEDED)
        run = follower(source)
        run.cancel("task t was killed (on_kill)")
        run.wait(lambda: "again")
        assert source.cancels == ["task t was killed (on_kill)"]

    def test_a_run_that_cannot_be_canceled_is_a_warning_and_following_goes_on(self):
        source, hooks = Source(RUNNING, SUCCEEDED), Seen()
        source.cancel_error = ParallelStepsError("run r already ended: Succeeded")
        assert follower(source, hooks).wait(lambda: "stop")["status"] == "Succeeded"
        assert hooks.warnings == ["the run was not canceled: run r already ended: Succeeded"]

    def test_a_cancel_flag_gives_its_reason(self):
        from parallel_steps.control import Cancel

        flag = Cancel()
        check = when_set(flag)
        assert check() is None
        flag.cancel("canceled by the user (SIGTERM)")
        assert check() == "canceled by the user (SIGTERM)"
        assert when_set(None) is None


class TestFinished:
    def test_a_succeeded_run_has_every_count(self):
        summary = finished(SUCCEEDED)
        assert summary["status"] == "Succeeded"
        assert (summary["mini_batches_total"], summary["items_failed"]) == (0, 0)

    def test_a_failed_run_raises_with_its_complete_summary(self):
        with pytest.raises(StepFailed, match=r"^Failed: the driver process is gone") as failed:
            finished({"run_id": "r", "status": "Failed", "status_reason": "the driver process is gone"})
        assert failed.value.summary["mini_batches_succeeded"] == 0

    def test_the_counts_a_run_wrote_stay(self):
        assert finished({**SUCCEEDED, "items_succeeded": 7})["items_succeeded"] == 7
