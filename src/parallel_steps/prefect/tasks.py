"""The `parallel_run` Prefect task (and `parallel_run_async`, for async flows): one parallel step inside a flow.

An adapter only (STYLE.md section 4): task parameters become a config (`config/layers.py`), the
run is launched where the config says (`jobs/launch.py`), what it reports goes to the task's log and
artifacts (`artifacts.py`), and the summary or `StepFailed` becomes the task run's result,
failure or Cancelled state.

A driver in this process runs on a helper thread while the task's own thread relays its
progress (Prefect calls stay on that thread) and watches for cancellation:

    task thread:  parameters -> config -> start step thread -> loop: relay progress,
                  poll flow run state -> cancel -> join -> summary / ParallelRunFailed
    step thread:  Launcher.run(hooks -> queue, cancel) -> queue

With `submit_to: ray_job` the driver is a Ray job and no step thread runs here: the task
follows the run (`follow.Follower`, async), reading the flow run's state with each poll and
cancelling the job when the flow run is cancelled. `parallel_run` waits for that on Prefect's
event loop; `parallel_run_async` awaits it on the flow's own.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.context import TaskRunContext
from prefect.states import Cancelled
from prefect.utilities.asyncutils import run_coro_as_sync

from prefect import get_run_logger, task

from ..control import Cancel
from ..errors import ParallelStepsError, StepFailed
from ..host import require_linux
from ..jobs import Follower, Launcher, RunHooks
from ..summary import RunSummary
from ..worker.shipping import EntryFunction, ship_functions
from .artifacts import Progress, publish_summary
from .assets import record_materialization, record_partitions
from .blocks import RayCluster, use_cluster
from .cache import STEP_REUSE
from .parameters import StepSpec, config_from_parameters, step_config

_POLL_S = 0.5  # the task thread's loop: progress relayed, step thread checked
_CANCEL_POLL_S = 1.0  # how often the flow run's state is read from the API
_STOP_GRACE_S = 60.0  # bounded wait for the step to stop after the task was interrupted
_NAMED = 30  # failed partitions named in the task run's message; the summary has them all
Logger = logging.LoggerAdapter[Any] | logging.Logger


class ParallelRunFailed(StepFailed):
    """The step ended Failed; the task run fails with its reason, the partitions that failed (a step over
    partitions) and where to look."""

    def __init__(self, summary: Mapping[str, Any]):
        super().__init__(summary)
        failed = summary.get("partitions_failed") or []
        named = f"; failed partitions: {', '.join(failed[:_NAMED])}{' ...' if len(failed) > _NAMED else ''}"
        self.args = (
            f"step {summary.get('name')} {summary.get('status')}: {summary.get('status_reason')}"
            f"{named if failed else ''} (see {summary.get('job_result')})",
        )


def _task_run_name(parameters: dict[str, Any]) -> str:
    """Task runs are named after their step, so a flow with several steps reads well in the UI."""
    try:
        return config_from_parameters(parameters).name
    except ParallelStepsError:
        return "parallel-run"  # the task run itself then fails with the config error


@task(name="parallel_run", task_run_name=_task_run_name, cache_policy=STEP_REUSE, persist_result=True)
def parallel_run(
    parallel_run_config: StepSpec = None,
    *,
    run: EntryFunction | None = None,
    init: EntryFunction | None = None,
    shutdown: EntryFunction | None = None,
    ray_cluster: RayCluster | str | None = None,
    **fields: Any,
) -> dict[str, Any] | State:
    """Run a parallel step (Azure ML ParallelRunStep) as a Prefect task and return its run summary.

    Progress goes to the task's log and a progress artifact; the run summary (and
    the failed mini-batches, if any) become table artifacts. A retry of the task
    run resumes the step; cancelling the flow run stops every worker. With
    `allow_reuse` (the default) a rerun with the same inputs, script and settings
    is Cached; set `allow_reuse=False` to always run.

    Args:
        parallel_run_config: the step, as a `ParallelRunConfig`, a dict of config fields or the path of a
            step YAML file (default: only `fields`).
        run, init, shutdown: functions to run instead of an `entry_script`: `run(mini_batch)`, and
            `init()` / `shutdown()` once per worker. Functions defined in the flow file travel to the
            workers by value. The step's own reuse covers them; the task run is not Cached by Prefect.
        ray_cluster: the Ray cluster, as a `RayCluster` block or the name of a saved one (its address and
            token), instead of `ray_address` and a token in the environment.
        **fields: config fields (`entry_script`, `inputs`, `mini_batch_size`, `process_count_per_node`,
            `error_threshold`, `backend`, ...) overriding `parallel_run_config`; `None` leaves a field as it is,
            so flow parameters with a `None` default override only when given.

    Returns:
        The run summary (`status`, `status_reason`, `reused`, `output_file`, `mini_batches_total`, ...).
        On success the output folder is a Prefect asset this task run materialized (the run's facts as
        its metadata), the inputs assets it read; a link artifact opens the run's report. A step over
        partitions (`partitions=`) materializes each partition that succeeded instead (`<output>/<key>`, its
        facts), also when others failed.

    Raises:
        ParallelRunFailed: the step ended Failed (a `StepFailed`; `.summary` is the run summary; a step over
            partitions names those that failed, after the others' materializations were sent). A step
            Canceled (by cancelling the flow run) ends the task run Cancelled instead.
        ConfigError, InputError: an invalid field, a function that cannot be shipped or an unreadable
            input, before any worker starts.
        WriteRefused: the disk refused a write before the step began (full, failing or read-only); the
            message names the path, the cause and what to do, and a retry resumes the step.

    In an async flow, `await parallel_run_async(...)` does the same and, with `submit_to="ray_job"`,
    follows the job on the flow's event loop without holding a thread.

    Example:
        >>> @flow
        ... def score(mini_batch_size: int | None = None):
        ...     return parallel_run("step.yaml", mini_batch_size=mini_batch_size)
    """
    require_linux()
    step = _TaskStep.begin(parallel_run_config, fields, run, init, shutdown, ray_cluster)
    try:
        summary = run_coro_as_sync(step.follow()) if step.launcher.elsewhere else _run_watched(step)
        return step.succeeded(summary)
    except StepFailed as failed:
        return step.failed(failed)


@task(name="parallel_run", task_run_name=_task_run_name, cache_policy=STEP_REUSE, persist_result=True)
async def parallel_run_async(
    parallel_run_config: StepSpec = None,
    *,
    run: EntryFunction | None = None,
    init: EntryFunction | None = None,
    shutdown: EntryFunction | None = None,
    ray_cluster: RayCluster | str | None = None,
    **fields: Any,
) -> dict[str, Any] | State:
    """`parallel_run` for async flows: `await parallel_run_async(...)`. With `submit_to="ray_job"` the
    task follows the Ray job on the flow's event loop and holds no thread while it waits, so one flow
    can follow many long steps at once; a local driver runs in a worker thread. Arguments, result,
    errors, retries, caching and cancellation are those of `parallel_run`.

    Example:
        >>> @flow
        ... async def score_all(days: list[str]):
        ...     return await asyncio.gather(
        ...         *(parallel_run_async("step.yaml", inputs=f"data/{day}", submit_to="ray_job") for day in days)
        ...     )
    """
    require_linux()
    # What calls Prefect's API or reads the run's files runs in a worker thread, off the event loop.
    step = await asyncio.to_thread(_TaskStep.begin, parallel_run_config, fields, run, init, shutdown, ray_cluster)
    try:
        summary = await step.follow() if step.launcher.elsewhere else await asyncio.to_thread(_run_watched, step)
        return await asyncio.to_thread(step.succeeded, summary)
    except StepFailed as failed:
        return await asyncio.to_thread(step.failed, failed)


@dataclass
class _TaskStep:
    """The step of one task run: its launcher (its run directory is one per task run: its retries resume
    it, and no other task run shares it), logger and progress artifact, and how the task run ends."""

    launcher: Launcher
    name: str
    flow_run_id: UUID | None
    logger: Logger
    progress: Progress

    @classmethod
    def begin(
        cls,
        parallel_run_config: StepSpec,
        fields: dict[str, Any],
        run: EntryFunction | None,
        init: EntryFunction | None,
        shutdown: EntryFunction | None,
        ray_cluster: RayCluster | str | None = None,
    ) -> _TaskStep:
        config = step_config(parallel_run_config, **fields)
        if ray_cluster is not None:
            config = use_cluster(config, ray_cluster)
        entry_callables = ship_functions(run, init, shutdown)
        logger = get_run_logger()
        task_run = TaskRunContext.get().task_run
        run_dir = config.resolved_run_root() / f"{config.name}-{task_run.id}"
        logger.info("step %s: run directory %s", config.name, run_dir)
        launcher = Launcher(config, run_dir=run_dir, run_id=run_dir.name, entry_callables=entry_callables)
        return cls(launcher, config.name, task_run.flow_run_id, logger, Progress(config.name, logger))

    async def follow(self) -> RunSummary:
        """Start the driver elsewhere (a retry of the task run finds the run's Ray job still running and
        follows it) and follow it until it ends; a cancelled flow run cancels it, once."""
        follower = await asyncio.to_thread(self.launcher.follow, self.progress)
        try:
            with _FlowRunWatch(self.flow_run_id, self.logger) as flow_run:
                return await follower.result_async(stop=lambda: self._stop_reason(flow_run))
        except StepFailed:
            raise
        except BaseException:
            self._on_interrupted(follower)  # brief, and only when the task run is interrupted
            raise

    def _stop_reason(self, flow_run: _FlowRunWatch) -> str | None:
        reason = flow_run.cancel_reason()
        if reason:
            self.logger.warning("step %s: %s; canceling its run", self.name, reason)
        return reason

    def _on_interrupted(self, follower: Follower) -> None:
        """The task run stopped following the run: a cancelled flow run cancels it; otherwise (a worker
        restarting) the run goes on for the retry to follow."""
        with _FlowRunWatch(self.flow_run_id, self.logger) as flow_run:
            if reason := flow_run.cancel_reason():
                follower.cancel(reason)

    def succeeded(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """The task run's result: the summary, published."""
        self.progress.finish(summary)
        publish_summary(summary)
        record_materialization(self.launcher.config, summary, self.logger)
        self.logger.info(
            "step %s: %s%s: %s",
            self.name,
            summary["status"],
            " (reused)" if summary["reused"] else "",
            summary["output_file"] or summary["output"],
        )
        return dict(summary)

    def failed(self, failed: StepFailed) -> State:
        """A Canceled step ends the task run Cancelled (not a failure of the step); a Failed one raises, after
        the materializations of its partitions that succeeded (a step over partitions writes their outputs)."""
        self.progress.finish(failed.summary)
        publish_summary(failed.summary)
        record_partitions(self.launcher.config, failed.summary, self.logger)
        if failed.summary.get("status") == "Canceled":
            return Cancelled(message=str(ParallelRunFailed(failed.summary)))
        raise ParallelRunFailed(failed.summary) from None


def _run_watched(step: _TaskStep) -> RunSummary:
    """Run the step's driver on a helper thread; anything that interrupts this thread (a runner's SIGTERM,
    a task timeout) or a cancelled flow run cancels the step, which stops its workers."""
    messages: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue[tuple[str, Any]]()
    cancel = Cancel()
    thread = _StepThread(step.launcher, messages, cancel)
    thread.start()
    try:
        with _FlowRunWatch(step.flow_run_id, step.logger) as watch:
            while thread.is_alive():
                _relay(messages, step.progress, timeout=_POLL_S)
                if not cancel.is_set() and (reason := watch.cancel_reason()):
                    step.logger.warning("step %s: %s; stopping the workers", step.name, reason)
                    cancel.cancel(reason)
    except BaseException as interruption:
        cancel.cancel(f"the Prefect task run was interrupted ({type(interruption).__name__})")
        thread.join(_STOP_GRACE_S)
        raise
    _relay(messages, step.progress)
    return thread.result()


class _StepThread(threading.Thread):
    """`Launcher.run` with its hooks turned into messages, so Prefect calls stay on the task's thread."""

    def __init__(self, launcher: Launcher, messages: queue.SimpleQueue[tuple[str, Any]], cancel: Cancel):
        super().__init__(name=f"parallel-run-{launcher.config.name}", daemon=True)
        self.launcher, self.cancel = launcher, cancel
        self.hooks = _Queued(messages)
        self._summary: RunSummary | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._summary = self.launcher.run(self.hooks, self.cancel)
        except BaseException as exc:  # re-raised on the task's thread by result()
            self._error = exc

    def result(self) -> RunSummary:
        if self._error is not None:
            raise self._error
        assert self._summary is not None  # Launcher.run returns a summary or raises
        return self._summary


class _Queued(RunHooks):
    """Hooks that queue what the run reports for the task's thread."""

    def __init__(self, messages: queue.SimpleQueue[tuple[str, Any]]):
        self.messages = messages

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        self.messages.put(("progress", snapshot))

    def event(self, event: Mapping[str, Any]) -> None:
        self.messages.put(("event", event))


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
        progress.progress(latest)


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
