"""How a Ray job's end is read (against a fake Jobs API client): one call per look, only HTTP 404 means
the job is unknown, any other failure is an error to retry; and `run_status` reads the run's job
record once per look."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import requests
from ray.job_submission import JobStatus

from parallel_steps.errors import ParallelStepsError
from parallel_steps.jobs import ray_job
from parallel_steps.jobs import state as run_state
from parallel_steps.store.runs import read_ray_job, write_ray_job, write_summary

RECORD = {"address": "http://head:8265", "submission_id": "parallel-steps-run-1"}


class FakeJobs:
    """A Jobs API client that answers every `get_job_info` with `answer` (raised if an exception)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def get_job_info(self, job_id):
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def jobs(monkeypatch):
    def use(answer) -> FakeJobs:
        client = FakeJobs(answer)
        monkeypatch.setattr(ray_job, "_client", lambda address: client)
        return client

    return use


def test_a_running_job_has_not_ended(jobs):
    client = jobs(SimpleNamespace(status=JobStatus.RUNNING, message=""))
    assert ray_job.job_ended(RECORD) is None
    assert client.calls == 1


def test_an_ended_job_is_read_with_one_call_and_its_last_message_line(jobs):
    client = jobs(
        SimpleNamespace(status=JobStatus.FAILED, message="Traceback ...\n  ...\nMemoryError: out of memory\n")
    )
    status, reason = ray_job.job_ended(RECORD)
    assert (status, client.calls) == ("Failed", 1)
    assert reason == (
        "the Ray job parallel-steps-run-1 of the driver ended FAILED: MemoryError: out of memory; "
        "rerun the step to resume it"
    )


def test_a_stopped_job_is_a_canceled_run(jobs):
    jobs(SimpleNamespace(status=JobStatus.STOPPED, message="stopped"))
    assert ray_job.job_ended(RECORD)[0] == "Canceled"


def test_only_a_404_means_the_cluster_does_not_know_the_job(jobs):
    jobs(RuntimeError("Request failed with status code 404: Job parallel-steps-run-1 does not exist."))
    status, reason = ray_job.job_ended(RECORD)
    assert status == "Failed"
    assert "is unknown to the cluster at http://head:8265 (restarted?)" in reason


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("Request failed with status code 502: Bad Gateway."),
        requests.ConnectionError("Connection refused"),
    ],
    ids=["proxy 502", "network"],
)
def test_any_other_failure_is_an_error_the_follower_retries(jobs, failure):
    jobs(failure)
    with pytest.raises(ParallelStepsError, match=r"^the Ray Jobs API did not answer about job parallel-steps-run-1: "):
        ray_job.job_ended(RECORD)


def test_run_status_reads_the_job_record_once_and_asks_the_cluster_once(jobs, tmp_path, monkeypatch):
    write_ray_job(tmp_path, RECORD["address"], RECORD["submission_id"])
    write_summary(tmp_path, {"run_id": "run-1", "status": "Running", "status_reason": "running"})
    client = jobs(SimpleNamespace(status=JobStatus.FAILED, message="exit code 1"))
    reads = []
    monkeypatch.setattr(run_state, "read_ray_job", lambda run_dir: reads.append(run_dir) or read_ray_job(run_dir))
    summary = run_state.run_status(str(tmp_path))
    assert (summary["status"], summary["ray_job"]) == ("Failed", "parallel-steps-run-1")
    assert (len(reads), client.calls) == (1, 1)
