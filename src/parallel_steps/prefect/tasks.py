"""The `parallel_run` Prefect task: one parallel step inside a flow.

An adapter only (STYLE.md section 4): task parameters become a config, `run_step`
runs on a helper thread while the task's own thread reports progress and
watches for cancellation, and the summary or `StepFailed` becomes the task
run's result or failure.

    task thread:  parameters -> config -> start step thread -> loop: relay progress,
                  poll flow run state -> cancel -> join -> summary / ParallelRunFailed
    step thread:  run_step(config, run_dir, on_progress, on_event, cancel) -> queue

With `submit_to: ray_job` the driver is a Ray job (`jobs.submit`) and no step thread
runs here: the task follows the run with async polls of its status and of the flow
run's state, cancelling the job when the flow run is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.context import TaskRunContext
from prefect.states import Cancelled
from prefect.utilities.asyncutils import run_coro_as_sync

from prefect import get_run_logger, task

from ..config import ParallelRunConfig
from ..control import Cancel
from ..errors import ParallelStepsError, StepFailed
from ..jobs import RunHandle, cancel, submit, watch
from ..platform import require_linux
from ..step import run_step
from ..summary import RunSummary
from .artifacts import Progress, publish_summary
from .cache import STEP_REUSE
from .parameters import StepSpec, config_from_parameters, step_config

_POLL_S = 0.5  # the task thread's loop: progress relayed, step thread checked
_CANCEL_POLL_S = 1.0  # how often the flow run's state is read from the API
_STOP_GRACE_S = 60.0  # bounded wait for the step to stop after the task was interrupted


class ParallelRunFailed(StepFailed):
    """The step ended Failed; the task run fails with its reason and where to look."""

    def __init__(self, summary: Mapping[str, Any]):
        super().__init__(summary)
        self.args = (
            f"step {summary.get('name')} {summary.get('status')}: {summary.get('status_reason')} "
            f"(see {summary.get('job_result')})",
        )


def _task_run_name(parameters: dict[str, Any]) -> str:
    """Task runs are named after their step, so a flow with several steps reads well in the UI."""
    try:
        return config_from_parameters(parameters).name
    except ParallelStepsError:
        return "parallel-run"  # the task run itself then fails with the config error


@task(name="parallel_run", task_run_name=_task_run_name, cache_policy=STEP_REUSE, persist_result=True)
def parallel_run(parallel_run_config: StepSpec = None, **fields: Any) -> dict[str, Any] | State:
    """Run a parallel step (Azure ML ParallelRunStep) as a Prefect task and return its run summary.

    Progress goes to the task's log and a progress artifact; the run summary (and
    the failed mini-batches, if any) become table artifacts. A retry of the task
    run resumes the step; cancelling the flow run stops every worker. With
    `allow_reuse` (the default) a rerun with the same inputs, script and settings
    is Cached; set `allow_reuse=False` to always run.

    Args:
        parallel_run_config: the step, as a `ParallelRunConfig`, a dict of config fields or the path of a
            step YAML file (default: only `fields`).
        **fields: config fields (`entry_script`, `inputs`, `mini_batch_size`, `process_count_per_node`,
            `error_threshold`, `backend`, ...) overriding `parallel_run_config`; `None` leaves a field as it is,
            so flow parameters with a `None` default override only when given.

    Returns:
        The run summary (`status`, `status_reason`, `reused`, `output_file`, `mini_batches_total`, ...).

    Raises:
        ParallelRunFailed: the step ended Failed (a `StepFailed`; `.summary` is the run summary). A step
            Canceled (by cancelling the flow run) ends the task run Cancelled instead.
        ConfigError, InputError: an invalid field or an unreadable input, before any worker starts.

    Example:
        >>> @flow
        ... def score(mini_batch_size: int | None = None):
        ...     return parallel_run("step.yaml", mini_batch_size=mini_batch_size)
    """
    require_linux()
    config = step_config(parallel_run_config, **fields)
    logger = get_run_logger()
    run_dir = _run_dir(config)
    logger.info("step %s: run directory %s", config.name, run_dir)
    progress = Progress(config.name, logger)
    try:
        if config.submit_to == "ray_job":
            summary = _follow_ray_job(config, run_dir, progress, logger)
        else:
            summary = _run_watched(config, run_dir, progress, logger)
    except StepFailed as failed:
        progress.finish(failed.summary)
        publish_summary(failed.summary)
        if failed.summary.get("status") == "Canceled":  # shown as Cancelled, not as a failure of the step
            return Cancelled(message=str(ParallelRunFailed(failed.summary)))
        raise ParallelRunFailed(failed.summary) from None
    progress.finish(summary)
    publish_summary(summary)
    logger.info(
        "step %s: %s%s: %s",
        config.name,
        summary["status"],
        " (reused)" if summary["reused"] else "",
        summary["output_file"] or summary["output"],
    )
    return dict(summary)


def _run_dir(config: ParallelRunConfig) -> Path:
    """One run directory per task run: its retries resume it, and no other task run shares it."""
    task_run = TaskRunContext.get().task_run
    return config.resolved_run_root() / f"{config.name}-{task_run.id}"


def _run_watched(
    config: ParallelRunConfig, run_dir: Path, progress: Progress, logger: logging.LoggerAdapter[Any] | logging.Logger
) -> Mapping[str, Any]:
    """Run the step on a helper thread; anything that interrupts this thread (a runner's SIGTERM, a
    task timeout) or a cancelled flow run cancels the step, which stops its workers."""
    messages: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue[tuple[str, Any]]()
    cancel = Cancel()
    step = _StepThread(config, run_dir, messages, cancel)
    step.start()
    try:
        with _FlowRunWatch(TaskRunContext.get().task_run.flow_run_id, logger) as watch:
            while step.is_alive():
                _relay(messages, progress, timeout=_POLL_S)
                if not cancel.is_set() and (reason := watch.cancel_reason()):
                    logger.warning("step %s: %s; stopping the workers", config.name, reason)
                    cancel.cancel(reason)
    except BaseException as interruption:
        cancel.cancel(f"the Prefect task run was interrupted ({type(interruption).__name__})")
        step.join(_STOP_GRACE_S)
        raise
    _relay(messages, progress)
    return step.result()


def _follow_ray_job(
    config: ParallelRunConfig, run_dir: Path, progress: Progress, logger: logging.LoggerAdapter[Any] | logging.Logger
) -> Mapping[str, Any]:
    """Submit the driver as a Ray job (a retry of the task run finds the run's job still running and
    follows it), then follow the run. A cancelled flow run cancels the job; an interrupted task run
    (a worker restarting) leaves it running for the retry."""
    job = submit(config, run_id=run_dir.name, run_dir=run_dir)
    logger.info("step %s: the driver runs as Ray job %s", config.name, job.summary().get("ray_job"))
    flow_run_id = TaskRunContext.get().task_run.flow_run_id
    try:
        summary: dict[str, Any] = run_coro_as_sync(_follow(job, flow_run_id, progress, logger))
    except BaseException:
        with _FlowRunWatch(flow_run_id, logger) as flow_run:
            if reason := flow_run.cancel_reason():
                cancel(str(job.run_dir), reason=reason)
        raise
    if summary["status"] != "Succeeded":
        raise StepFailed(summary)
    return summary


async def _follow(
    job: RunHandle, flow_run_id: UUID | None, progress: Progress, logger: logging.LoggerAdapter[Any] | logging.Logger
) -> dict[str, Any]:
    """The run's status every poll, relayed as progress, until it ends; the flow run's state is read
    with it, and a cancelled flow run cancels the run once."""
    summary: dict[str, Any] = {}
    shown, canceled = None, False
    on_error = lambda exc: logger.warning("the run's status cannot be read now (%s); trying again", exc)  # noqa: E731
    async with get_client() as client:
        async for summary in watch(str(job.run_dir), interval=_CANCEL_POLL_S, on_error=on_error):
            if "mini_batches_done" in summary and summary.get("elapsed_s") != shown:  # a new snapshot
                shown = summary.get("elapsed_s")
                progress.update(summary)
            if canceled or flow_run_id is None:
                continue
            try:
                reason = _cancel_reason((await client.read_flow_run(flow_run_id)).state)
            except Exception as exc:  # an unreachable API must not stop the step; the next poll retries
                logger.debug("could not read the flow run state: %s", exc)
                continue
            if reason:
                logger.warning("step %s: %s; canceling its Ray job", job.run_dir.name, reason)
                await asyncio.to_thread(cancel, str(job.run_dir), None, reason)
                canceled = True
    return summary


class _StepThread(threading.Thread):
    """`run_step` with its callbacks turned into messages, so Prefect calls stay on the task's thread."""

    def __init__(
        self, config: ParallelRunConfig, run_dir: Path, messages: queue.SimpleQueue[tuple[str, Any]], cancel: Cancel
    ):
        super().__init__(name=f"parallel-run-{config.name}", daemon=True)
        self.config, self.run_dir, self.messages, self.cancel = config, run_dir, messages, cancel
        self._summary: RunSummary | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._summary = run_step(
                self.config,
                run_dir=self.run_dir,
                run_id=self.run_dir.name,
                on_progress=lambda snapshot: self.messages.put(("progress", snapshot)),
                on_event=lambda event: self.messages.put(("event", event)),
                cancel=self.cancel,
            )
        except BaseException as exc:  # re-raised on the task's thread by result()
            self._error = exc

    def result(self) -> RunSummary:
        if self._error is not None:
            raise self._error
        assert self._summary is not None  # run_step returns a summary or raises
        return self._summary


def _relay(messages: queue.SimpleQueue[tuple[str, Any]], progress: Progress, timeout: float | None = None) -> None:
    """Pass queued events on, and the latest progress snapshot (older ones are stale)."""
    latest = None
    try:
        item = messages.get(timeout=timeout) if timeout else messages.get_nowait()
        while True:
            kind, payload = item
            if kind == "progress":
                latest = payload
            else:
                progress.event(payload)
            item = messages.get_nowait()
    except queue.Empty:
        pass
    if latest is not None:
        progress.update(latest)


class _FlowRunWatch:
    """Reads the flow run's state now and then. Prefect does not interrupt a running task when its flow
    run is cancelled from the API or UI (only a runner's SIGTERM reaches the process), so the task looks."""

    def __init__(self, flow_run_id: UUID | None, logger: logging.LoggerAdapter[Any] | logging.Logger):
        self.flow_run_id, self.logger = flow_run_id, logger
        self._client = get_client(sync_client=True) if flow_run_id else None
        self._next = 0.0

    def __enter__(self) -> _FlowRunWatch:
        if self._client:
            self._client.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._client:
            self._client.__exit__(*exc_info)

    def cancel_reason(self) -> str | None:
        if self._client is None or time.monotonic() < self._next:
            return None
        self._next = time.monotonic() + _CANCEL_POLL_S
        try:
            state = self._client.read_flow_run(self.flow_run_id).state
        except Exception as exc:  # an unreachable API must not stop the step; the next poll retries
            self.logger.debug("could not read the flow run state: %s", exc)
            return None
        return _cancel_reason(state)


def _cancel_reason(state: State | None) -> str | None:
    """Why the step must stop, when the flow run's state says it is cancelled."""
    if state and (state.is_cancelling() or state.is_cancelled()):
        return f"the Prefect flow run was cancelled ({state.name})"
    return None
