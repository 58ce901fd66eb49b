"""`submit_to: ray_job`: the run's driver runs on the Ray cluster as a Ray job (Ray's Jobs API).

    caller (CLI, Airflow worker or triggerer, Prefect)      Ray head node
    jobs/launch.py: submit_or_attach -> run dir: step.json,      job <base>-<attempt>: job_entry.py picks the Python,
                                   ray_job.json                 python -m parallel_steps.jobs.detached RUN_DIR RUN_ID
                                -> Jobs API: submit_job         writes run.json, the ledger, logs, the output
    jobs/follow.py, jobs/state.py: status, logs -> the run directory  its workers: Ray actors across the cluster
                             job_ended, stop_job -> Jobs API

The job ships the project (`py_modules`) and the step's code folder (`working_dir`: the
source directory, else the entry script's folder); the run directory must be on storage
the caller and every node mount at the same path (the driver writes it, the caller reads it).

A run has at most one job pending or running, whose id is derived from the run
(`parallel-steps-<run id>-<hash of the run directory>-<attempt>`): a caller finding it
attaches to it, the next attempt is submitted only after the cluster reports the last one
ended, and the cluster refuses a second job with an id it knows, so two callers starting
the same attempt end up following one job.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import requests
from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient

from ..cluster.access import auth_headers, tls_verify
from ..cluster.connect import check_reachable
from ..config.model import ParallelRunConfig
from ..config.secrets import secret_fields
from ..errors import ConfigError, ParallelStepsError
from ..storage.objects import is_url
from ..store.runs import RAY_JOB_FILE, read_summary, write_ray_job
from ..summary import TERMINAL
from .detached import hand_secrets, prepare, register, withdraw_secrets
from .ray_job_entry import entrypoint

_ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # parallel_steps/, shipped to the job
_EXIT_S = 120.0  # how long a driver that has ended its run may take to exit before another may start
_POLL_S = 0.5
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_NOT_SHIPPED = [".git", "__pycache__", ".venv", ".venvs", ".parallel_steps"]
_AUTH_HINT = (
    "give the head's host:port or the dashboard's http://host:8265; a token-protected cluster also needs "
    "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN"
)


def submit_or_attach(config: ParallelRunConfig, run_dir: Path, run_id: str, entry_callables: bytes | None) -> None:
    """Follow the run's Ray job when one is pending or running, else submit its next attempt (its id is
    then in `ray_job.json`)."""
    address = _address(config)
    client = _client(address)
    base = _job_base(run_dir, run_id)
    latest = _latest_job(client, base)
    if latest is not None and latest.submission_id and latest.status in _ACTIVE:
        if (read_summary(run_dir) or {}).get("status") not in TERMINAL:
            write_ray_job(run_dir, address, latest.submission_id)
            return
        _wait_for_end(client, latest.submission_id)  # its driver has ended the run and is exiting
    job_id = f"{base}-{_attempt(latest.submission_id, base) + 1 if latest else 1}"
    job_config = _as_the_job_sees_it(config)
    prepare(job_config, run_dir, run_id, entry_callables)
    hand_secrets(run_dir, secret_fields(job_config, resolve=True))  # never in the runtime env: the dashboard shows it
    write_ray_job(run_dir, address, job_id)
    try:
        client.submit_job(
            entrypoint=entrypoint(str(run_dir), run_id, config.ray_job_python),
            submission_id=job_id,
            runtime_env=_runtime_env(config, run_dir),
            metadata={"parallel_steps_step": config.name, "parallel_steps_run_dir": str(run_dir)},
        )
    except Exception as exc:
        if _status(client, job_id) in _ACTIVE:  # another caller submitted this attempt first: follow it
            return
        (run_dir / RAY_JOB_FILE).unlink(missing_ok=True)
        withdraw_secrets(run_dir)
        raise ConfigError(
            "submit_to", f"the Ray cluster at {address} refused the job: {_last_line(str(exc), exc)}"
        ) from None
    register(config, run_dir, run_id, pid=None)


def job_ended(record: Mapping[str, str]) -> tuple[str, str] | None:
    """(status, reason) when the run's Ray job (its `ray_job.json` record) has ended; None while it is
    pending or running. One Jobs API call."""
    address, job_id = record["address"], record["submission_id"]
    info = _info(_client(address), job_id)
    again = "; rerun the step to resume it"
    if info is None:
        return (
            "Failed",
            f"the Ray job {job_id} of the driver is unknown to the cluster at {address} (restarted?){again}",
        )
    if info.status in _ACTIVE:
        return None
    if info.status == JobStatus.STOPPED:
        return "Canceled", f"the Ray job {job_id} of the driver was stopped before the driver finished{again}"
    message = _last_line(info.message or "")
    return "Failed", f"the Ray job {job_id} of the driver ended {info.status.value}: {message}{again}"


def stop_job(record: Mapping[str, str]) -> None:
    """Stop the run's Ray job: Ray sends the driver SIGTERM (it stops its workers), then SIGKILL after
    RAY_JOB_STOP_WAIT_TIME_S (set on the head node; Ray's default is 3 s)."""
    client, job_id = _client(record["address"]), record["submission_id"]
    if _status(client, job_id) in _ACTIVE:
        with _jobs_api(job_id):
            client.stop_job(job_id)


# The job ---------------------------------------------------------------------------------------


def _as_the_job_sees_it(config: ParallelRunConfig) -> ParallelRunConfig:
    """The config the job's driver runs: its code in the job's working directory (where the runtime env
    unpacks it), paths absolute (the job does not start in the caller's folder), the cluster it runs in."""
    code = _code_folder(config)
    job = dict(
        ray_address=None,
        inputs=[
            dataset.model_copy(update=dict(path=[_absolute(p) for p in dataset.path])) for dataset in config.inputs
        ],
        side_inputs={name: _absolute(path) for name, path in config.side_inputs.items()},
        models={name: _absolute(path) for name, path in config.models.items()},
        output=_absolute(config.output) if config.output else None,
        run_root=str(config.resolved_run_root()),
    )
    if config.source_directory:
        job["source_directory"] = "."
    if config.entry_script:
        script = Path(config.source_directory or ".", config.entry_script).absolute()
        job["entry_script"] = os.path.relpath(script, code)
    return config.with_overrides(**job)


def _runtime_env(config: ParallelRunConfig, run_dir: Path) -> dict[str, Any]:
    """The project as a py_module (the job runs the caller's version) and the step's code folder as the
    working directory; no environment variable, as Ray shows the runtime env to whoever opens the
    dashboard (the workers' variables reach the driver through `detached.hand_secrets`)."""
    runtime_env: dict[str, Any] = {"py_modules": [_PACKAGE]}
    code = _code_folder(config)
    if code is not None:
        leave_out = [config.resolved_run_root(), run_dir] + ([Path(config.output)] if config.output else [])
        runtime_env["working_dir"] = str(code)
        runtime_env["excludes"] = _NOT_SHIPPED + [
            "/" + os.path.relpath(path.absolute(), code) for path in leave_out if path.absolute().is_relative_to(code)
        ]
    return runtime_env


def _code_folder(config: ParallelRunConfig) -> Path | None:
    """The folder shipped as the job's working directory: the source directory, else the entry
    script's folder (None for cloudpickled functions, which the run directory holds)."""
    if config.source_directory:
        return Path(config.source_directory).absolute()
    return Path(config.entry_script).absolute().parent if config.entry_script else None


def _absolute(path: str) -> str:
    return path if is_url(path) else os.path.abspath(path)


# The Jobs API ----------------------------------------------------------------------------------


def _address(config: ParallelRunConfig) -> str:
    address = config.ray_address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError(
            "ray_address",
            "submit_to: ray_job needs the Ray cluster's address",
            "set ray_address (the head's host:port, or http://head:8265) or RAY_ADDRESS",
        )
    return address


@functools.cache
def _client(address: str) -> JobSubmissionClient:
    """A Jobs API client (one per address and process: making one asks the cluster for its version)."""
    if "://" not in address:
        check_reachable(address)  # Ray itself would retry a dead GCS address for minutes
    try:
        return JobSubmissionClient(address, headers=auth_headers(address), verify=tls_verify(address))
    except Exception as exc:  # ConnectionError, Ray's AuthenticationError, RuntimeError, ValueError
        raise ConfigError(
            "ray_address", f"cannot use the Ray Jobs API at {address}: {_last_line(str(exc), exc)}", _AUTH_HINT
        ) from None


def _job_base(run_dir: Path, run_id: str) -> str:
    """The run's job id without the attempt: readable (the run id) and unique (the run directory)."""
    digest = hashlib.sha256(str(run_dir.absolute()).encode()).hexdigest()[:8]
    return f"parallel-steps-{_UNSAFE.sub('_', run_id)[:120]}-{digest}"


def _attempt(job_id: str | None, base: str) -> int:
    """The attempt number of one of the run's jobs; 0 for another job."""
    suffix = (job_id or "").removeprefix(base + "-")
    return int(suffix) if suffix != job_id and suffix.isdigit() else 0


def _latest_job(client: JobSubmissionClient, base: str) -> JobDetails | None:
    jobs = [job for job in client.list_jobs() if _attempt(job.submission_id, base)]
    return max(jobs, key=lambda job: _attempt(job.submission_id, base), default=None)


def _wait_for_end(client: JobSubmissionClient, job_id: str) -> None:
    deadline = time.monotonic() + _EXIT_S
    while _status(client, job_id) in _ACTIVE:
        if time.monotonic() > deadline:
            raise ParallelStepsError(f"the Ray job {job_id} of the run's last driver has not ended after {_EXIT_S:g} s")
        time.sleep(_POLL_S)


def _status(client: JobSubmissionClient, job_id: str) -> JobStatus | None:
    info = _info(client, job_id)
    return info.status if info else None


def _info(client: JobSubmissionClient, job_id: str) -> JobDetails | None:
    """The job's details; None when the cluster does not know the job (HTTP 404). Any other failure (a
    dashboard restarting, a proxy's 502, the network) is a ParallelStepsError, so that whoever follows
    the run tries again instead of taking a running job for a lost one."""
    with _jobs_api(job_id):
        try:
            return client.get_job_info(job_id)
        except RuntimeError as exc:
            if "status code 404" in str(exc):  # Ray raises every answer but 200 as RuntimeError
                return None
            raise


@contextlib.contextmanager
def _jobs_api(job_id: str) -> Iterator[None]:
    """Failures to reach the Jobs API as one ParallelStepsError line."""
    try:
        yield
    except (RuntimeError, requests.RequestException) as exc:
        raise ParallelStepsError(
            f"the Ray Jobs API did not answer about job {job_id}: {_last_line(str(exc), exc)}"
        ) from None


def _last_line(text: str, exc: Exception | None = None) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else (type(exc).__name__ if exc else "no message")
