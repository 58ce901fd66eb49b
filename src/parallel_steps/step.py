"""The step API: `run_step(config)` and `ParallelRunStep`, the one entry every integration calls.

A run goes: check everything that can be checked (nothing is written on a user
error) -> wait for a run of the same step on the same inputs to end -> plan into
the run's ledger, taking finished results from earlier runs, then reuse the whole
step or run the rest on a worker pool; with nothing to reuse, the plan streams
into the running workers instead -> assemble the output -> write the summary.
Integrations only map their engine onto this.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import ParallelRunConfig, dump_json
from .driver import Counters, Driver, EventCallback, ProgressCallback, threshold_breach
from .errors import ConfigError, InputError, StepFailed
from .inputs.minibatch import MiniBatch
from .inputs.planner import Planner, iter_files
from .inputs.storage import GLOB_CHARS, is_url, upload
from .monitor import ResourceMonitor
from .pool.base import PoolSettings, WorkerPool, node_id_of
from .report import write_run_report
from .resources import default_process_count, gpu_ids
from .reuse import code_key, step_key
from .store.ledger import Ledger
from .store.logs import RunLogs, timestamp
from .store.output import assemble, link_or_copy
from .store.runs import CANCEL_FILE, RunIndex, key_lock, new_run_id, read_summary, write_summary
from .worker.runtime import WorkerSpec

_SIDE_INPUT_REF = re.compile(r"\$\{side_inputs\.([A-Za-z0-9_.-]+)\}")
_REUSE_SOURCES = 5  # earlier runs whose finished mini-batches a run looks up
_PLAN_CHUNK = 100  # mini-batches planned at a time: a few milliseconds of the driver


def run_step(
    config: ParallelRunConfig,
    *,
    run_dir: str | os.PathLike | None = None,
    run_id: str | None = None,
    on_progress: ProgressCallback | None = None,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    entry_callables: bytes | None = None,
) -> dict[str, Any]:
    """Run one parallel step to its end and return the run summary.

    Args:
        config: the step's configuration.
        run_dir: the run directory; a rerun in the same directory resumes it (default: a new
            directory under the run root).
        run_id: the id of a new run (default: generated from the step name).
        on_progress: called with a progress snapshot every few seconds and at the end.
        on_event: called with job events (started, mini-batch failed, worker replaced, ...).
        cancel: set it to stop the run; the summary then says `Canceled`.
        entry_callables: cloudpickled `{"init": f, "run": g, "shutdown": h}` used instead of `entry_script`.

    Raises:
        ConfigError, InputError: before anything is written.
        StepFailed: the run ended Failed or Canceled; `.summary` is the run summary.
    """
    return _StepRun(config, run_dir, run_id, on_progress, on_event, cancel, entry_callables).execute()


def reuse_key(config: ParallelRunConfig, entry_callables: bytes | None = None) -> str:
    """The step's reuse key (DESIGN.md section 6), computed without running: equal keys mean an
    earlier successful run's output is reused. Integrations use it as their cache key."""
    script, side_inputs = _check(config, entry_callables)
    code = _code_key(config, script, entry_callables, side_inputs)
    planner = Planner(config.inputs, config.batch_size, config.partition_keys, config.reuse_fingerprint)
    return step_key(code, (mini_batch.fingerprint for mini_batch in planner.mini_batches()))


def _code_key(
    config: ParallelRunConfig, script: Path | None, entry_callables: bytes | None, side_inputs: dict[str, str]
) -> str:
    skip = [config.resolved_run_root()]
    if config.output and not is_url(config.output):
        skip.append(Path(config.output))
    return code_key(config, script, entry_callables, side_inputs, skip=skip)


class ParallelRunStep:
    """A ParallelRunStep: a configuration plus the step's data, run with `.run()`.

    Args:
        name: the step name.
        parallel_run_config: a `ParallelRunConfig` (or pass its fields as keywords).
        inputs, output, side_inputs, arguments, allow_reuse: as in ParallelRunStep.

    Example:
        >>> step = ParallelRunStep(name="score-digits", entry_script="score.py",
        ...                        inputs=["data/images"], output="out", mini_batch_size=10)
        >>> summary = step.run()
    """

    def __init__(
        self,
        name: str | None = None,
        parallel_run_config: ParallelRunConfig | None = None,
        inputs: Any = None,
        output: str | None = None,
        side_inputs: Any = None,
        arguments: list[Any] | None = None,
        allow_reuse: bool | None = None,
        **fields: Any,
    ):
        given = dict(
            name=name,
            inputs=inputs,
            output=output,
            side_inputs=side_inputs,
            arguments=arguments,
            allow_reuse=allow_reuse,
            **fields,
        )
        given = {k: v for k, v in given.items() if v is not None}
        base = parallel_run_config or ParallelRunConfig()
        self.config = base.with_overrides(**given)

    def run(self, **overrides: Any) -> dict[str, Any]:
        """Run the step (with `overrides` applied) and return the run summary; raises StepFailed."""
        return run_step(self.config.with_overrides(**overrides))

    def submit(self, **overrides: Any):
        """Start the step in the background; returns a `RunHandle` (status, summary, wait, cancel, logs)."""
        from .jobs import submit

        return submit(self.config.with_overrides(**overrides))


# One run ---------------------------------------------------------------------------------------


class _StepRun:
    def __init__(self, config: ParallelRunConfig, run_dir, run_id, on_progress, on_event, cancel, entry_callables):
        self.config = config
        self.entry_callables = entry_callables
        self.on_progress, self.on_event = on_progress, on_event
        self.cancel = cancel or threading.Event()
        self.entry_script, self.side_inputs = _check(config, entry_callables)
        self.code = _code_key(config, self.entry_script, entry_callables, self.side_inputs)
        self.run_root = config.resolved_run_root()
        self.requested_dir = Path(run_dir).absolute() if run_dir else None
        self.requested_id = run_id
        self.counters = Counters()
        self.restarts: list[dict[str, str]] = []
        self.notes: list[str] = []  # the planner's advice, logged with the plan
        self.created_output = False  # this run made the output folder (removed again on a user error)
        self.started_at = time.time()

    # The phases ----------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        index = RunIndex(self.run_root)
        try:
            self._open_run_dir()
            summary = self._plan_and_run(index)
        except (InputError, ConfigError):  # a user error, found before any mini-batch ran: leave no trace
            index.remove(self.run_id)
            self._discard()
            raise
        finally:
            index.close()
        if summary["reused"]:
            self._keep_reused(summary) if self.requested_dir else self._discard()
        elif summary["status"] != "Succeeded":
            raise StepFailed(summary)
        return summary

    def _plan_and_run(self, index: RunIndex) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            workers = stack.enter_context(contextlib.ExitStack())  # closed before the output is assembled
            stack.enter_context(key_lock(self.run_root, self._lock_key(), self.config.first_task_creation_timeout))
            self.pool = None
            sources = self._reuse_sources(index)
            if sources:
                key = self._plan(sources)  # whole: whole-step reuse needs every fingerprint
                if self.config.allow_reuse and (summary := self._reuse_whole_step(index, key)):
                    return summary
                self.pending = self.ledger.pending()
            else:
                # Nothing to reuse: the workers start, and run the plan while it is being written.
                self.pool = workers.enter_context(self._pool())
                self.counters.planning = True
                self.pending = self._stream_plan()
            return self._run(index, workers)

    def _lock_key(self) -> str:
        """What a second run of this step on the same inputs waits for: the code key and the inputs
        as named (not as listed: the listing is written while the run goes)."""
        inputs = [
            dict(dataset.model_dump(), path=[p if is_url(p) else os.path.abspath(p) for p in dataset.path])
            for dataset in self.config.inputs
        ]
        return step_key(self.code, [json.dumps(inputs, sort_keys=True, default=str)])

    def _open_run_dir(self) -> None:
        self.run_dir = self.requested_dir or self.run_root / (self.requested_id or new_run_id(self.config.name))
        self.created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.parts_dir = self.run_dir / "parts"
        self.parts_dir.mkdir(exist_ok=True)
        output = self.config.output
        self.output_url = output if output and is_url(output) else None  # staged in the run folder, then uploaded
        self.output_dir = Path(output).absolute() if output and not self.output_url else self.run_dir / "output"
        self.ledger = Ledger(self.run_dir / "ledger.sqlite")
        self.run_id = self.ledger.get("run_id") or self.requested_id or self.run_dir.name
        self.resumed = self.ledger.get("code_key") == self.code
        if not self.resumed:
            self.ledger.clear_plan()
            shutil.rmtree(self.parts_dir)
            self.parts_dir.mkdir()
        self.ledger.set(run_id=self.run_id, code_key=self.code)
        self.logs = RunLogs(self.run_dir)
        _drop_stale_cancel(self.run_dir, self.started_at)

    def _plan(self, sources) -> str:
        """Write the whole plan into the ledger, taking finished results from `sources` (this run's
        and earlier ones); returns the step key (the code and every input fingerprint)."""
        self.counters = Counters()
        planner = self._planner(defer_files=False)
        self.ledger.clear_plan()
        mini_batches = planner.mini_batches()
        while chunk := list(itertools.islice(mini_batches, _PLAN_CHUNK)):
            self._add([(mini_batch, self._reusable(mini_batch, sources)) for mini_batch in chunk])
        self.ledger.commit()
        self.notes = planner.notes
        return step_key(self.code, self.ledger.fingerprints())

    def _stream_plan(self) -> Iterator[MiniBatch]:
        """The plan, written into the ledger a chunk at a time as the driver takes it, so the first
        mini-batches run while the rest is listed. Files are fingerprinted by the workers that read them."""
        planner = self._planner(defer_files=True)
        mini_batches = planner.mini_batches()
        while chunk := list(itertools.islice(mini_batches, _PLAN_CHUNK)):
            self._add([(mini_batch, None) for mini_batch in chunk], descriptors=False)
            yield from chunk
        self.counters.planning = False
        self.notes = planner.notes
        self._log_plan()

    def _planner(self, defer_files: bool) -> Planner:
        config = self.config
        return Planner(
            config.inputs, config.batch_size, config.partition_keys, config.reuse_fingerprint, defer_files=defer_files
        )

    def _reuse_sources(self, index: RunIndex) -> list[tuple[str, dict[str, dict[str, Any]]]]:
        """(run id, results by fingerprint): this run's own (a resume), then earlier runs' when allowed."""
        sources = [(self.run_id, self.ledger.results_by_fingerprint())] if self.resumed else []
        if self.config.allow_reuse:
            for record in index.with_code_key(self.code, exclude=self.run_id)[:_REUSE_SOURCES]:
                ledger = Ledger.open_readonly(Path(record["run_dir"]) / "ledger.sqlite")
                if ledger:
                    sources.append((record["run_id"], ledger.results_by_fingerprint()))
                    ledger.close()
        return sources

    def _reusable(self, mini_batch, sources) -> dict[str, Any] | None:
        for run_id, results in sources:
            result = results.get(mini_batch.fingerprint)
            if result is None or (result["part"] and not os.path.exists(result["part"].path)):
                continue
            part = result["part"]
            if part and run_id != self.run_id:
                part = part._replace(path=self._linked_spool(run_id, part.path))
            return dict(result, part=part, run_id=run_id)
        return None

    def _linked_spool(self, run_id: str, path: str) -> str:
        """Keep the run self-contained: link an earlier run's spool in (once), so cleaning that run
        does not take this run's reused rows with it."""
        own = self.parts_dir / f"{run_id}-{Path(path).name}"
        if not own.exists():
            link_or_copy(Path(path), own)
        return str(own)

    def _add(self, rows, descriptors: bool = True) -> None:
        self.ledger.add(rows, descriptors)
        for _mini_batch, reuse in rows:
            self.counters.mini_batches_total += 1
            if reuse:
                items = reuse["items"] if reuse["items"] is not None else reuse["returned"]
                self.counters.mini_batches_reused += 1
                self.counters.mini_batches_succeeded += 1
                self.counters.items_total += items
                self.counters.items_failed += reuse["items_failed"] or 0
                self.counters.items_succeeded += items - (reuse["items_failed"] or 0)

    def _discard(self) -> None:
        self.ledger.close()
        if self.created_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.created_output:  # a user error found while the plan streamed
            with contextlib.suppress(OSError):
                self.output_dir.rmdir()  # only if nothing was written there

    def _keep_reused(self, summary: dict[str, Any]) -> None:
        """A run folder the caller chose (a task instance's) keeps the restored output and the summary."""
        self.ledger.close()
        for leftover in ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"):
            (self.run_dir / leftover).unlink(missing_ok=True)
        shutil.rmtree(self.parts_dir, ignore_errors=True)
        write_summary(self.run_dir, summary)

    def _reuse_whole_step(self, index: RunIndex, key: str) -> dict[str, Any] | None:
        """An earlier successful run with the same step key: restore its output, start no worker."""
        earlier = index.succeeded_with_step_key(key)
        if not earlier or earlier["run_id"] == self.run_id:
            return None
        summary = read_summary(Path(earlier["run_dir"]))
        if not summary or summary.get("status") != "Succeeded" or _breaches(self.config, summary):
            return None  # e.g. its failed items were within looser thresholds than this run's
        output, target = summary.get("output"), summary.get("output_file")
        if target:
            # an uploaded output was assembled in its run folder first
            source = Path(earlier["run_dir"]) / "output" / target.rsplit("/", 1)[-1] if is_url(target) else Path(target)
            if not source.exists():
                return None
            if self.output_url:
                output, target = self.output_url, self._output_file_url()
                upload(source, target)
            elif self.config.output or self.requested_dir:  # else point at the earlier run's own output
                output = str(self.output_dir)
                target = str(link_or_copy(source, self.output_dir / self.config.append_row_file_name))
        # Counts describe this invocation: nothing ran, every mini-batch was reused from `run_id`.
        return dict(
            summary,
            reused=True,
            output=output,
            output_file=target,
            mini_batches_reused=summary["mini_batches_total"],
            mini_batches_run=0,
            workers_started=0,
            attempts_retried=0,
            started_at=timestamp(self.started_at),
            ended_at=timestamp(),
            elapsed_s=round(time.time() - self.started_at, 3),
            config=dump_json(self.config),
        )

    def _run(self, index: RunIndex, workers: contextlib.ExitStack) -> dict[str, Any]:
        index.register(self.run_id, self.config.name, self.run_dir, "Running", self.code)
        logs = self.logs
        log = self.log = logs.master_logger(self.run_id)
        log.info("run %s of step %s in %s", self.run_id, self.config.name, self.run_dir)
        if not self.counters.planning:
            self._log_plan()
        write_summary(
            self.run_dir, dict(self._summary("Running", "running", logs), pid=os.getpid(), host=os.uname().nodename)
        )
        while True:
            try:
                status, reason = self._drive(logs, log, workers)
                if status == "Succeeded" and self.config.output_action == "append_row":
                    self.output_file = self.output_dir / self.config.append_row_file_name
                    assemble(self.ledger.parts(), self.output_file, self.config.output_format)
                    log.info("output assembled: %s", self.output_file)
                if status == "Succeeded" and self.output_url:
                    upload(self.output_dir, self.output_url)
                    log.info("output uploaded to %s", self.output_url)
                break
            except (ConfigError, InputError):  # found when the workers start (e.g. a bad ray_address)
                logs.close(log)
                raise
            except Exception as exc:  # a system error of the driver itself
                log.exception("system error")
                workers.close()
                self.pool = None
                if len(self.restarts) >= self.config.max_job_restarts:
                    status, reason = "Failed", f"system error: {type(exc).__name__}: {exc}"
                    break
                self._restart(log, exc, index)
        summary = self._summary(status, reason, logs)
        self._finish(index, logs, log, summary)
        return summary

    def _restart(self, log, exc: Exception, index: RunIndex) -> None:
        """Resume after a system error: what the ledger committed stands, the rest is planned and runs again."""
        reason = f"{type(exc).__name__}: {exc}"
        self.restarts.append(dict(time=timestamp(), reason=reason))
        log.warning(
            "restart %d of %d after a system error: %s", len(self.restarts), self.config.max_job_restarts, reason
        )
        event = {"type": "restart", "time": time.time(), "restart": len(self.restarts), "reason": reason}
        self.logs.record_event(event)
        self.logs.flush()
        if self.on_event:
            self.on_event(event)
        self.ledger.rollback()
        self.resumed = True
        self._plan(self._reuse_sources(index))
        self._log_plan()
        self.pending = self.ledger.pending()

    def _drive(self, logs: RunLogs, log, workers: contextlib.ExitStack) -> tuple[str, str]:
        if not self.counters.planning and self.counters.done == self.counters.mini_batches_total:
            log.info("every mini-batch was reused; no worker started")
            breach = threshold_breach(self.config, self.counters)
            return ("Failed", breach) if breach else ("Succeeded", "every mini-batch was reused from earlier runs")
        self.created_output = not self.output_dir.exists()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        pool = self.pool or workers.enter_context(self._pool())
        with self._monitor(logs, pool):
            self.driver = Driver(
                self.config,
                self.ledger,
                self.pending,
                logs,
                log,
                pool,
                self.counters,
                self.on_progress,
                self.on_event,
                self.cancel,
                self.run_dir,
            )
            status, reason = self.driver.run()
        workers.close()  # workers stop (and run shutdown()) before the output is assembled
        logs.write_error_summary(self.driver.error_summary())
        return status, reason

    def _pool(self) -> WorkerPool:
        config, logs = self.config, self.logs
        arguments = _substitute(config.arguments, config.side_inputs, self.side_inputs)
        gpus = gpu_ids()

        def make_spec(node_index: int, node_id: str, process_name: str) -> WorkerSpec:
            return WorkerSpec(
                node_id=node_id,
                process_name=process_name,
                logs=logs.worker(node_id, process_name),
                parts_dir=str(self.parts_dir),
                output_dir=str(self.output_dir),
                output_format=config.output_format,
                append_row=config.output_action == "append_row",
                entry_script=str(self.entry_script) if self.entry_script else None,
                entry_callables=self.entry_callables,
                source_directory=config.source_directory,
                arguments=arguments,
                side_inputs=self.side_inputs,
                logging_level=config.logging_level,
                profile=config.profiling_module == "cProfile",
                fingerprint_mode=config.reuse_fingerprint,
            )

        settings = PoolSettings(
            node_count=config.node_count,
            process_count_per_node=config.process_count_per_node or len(gpus) or default_process_count(),
            make_spec=make_spec,
            environment=dict(config.environment_variables),
            gpu_ids=gpus,
            memory_limit=config.memory_limit_bytes,
            shutdown_timeout=config.run_invocation_timeout,
        )
        if config.backend == "ray":
            from .pool.ray import RayWorkerPool

            return RayWorkerPool(settings, config)
        from .pool.local import LocalWorkerPool

        return LocalWorkerPool(settings)

    def _monitor(self, logs: RunLogs, pool: WorkerPool):
        interval = self.config.resource_monitor_interval
        if not interval:
            return contextlib.nullcontext()
        nodes = [node_id_of(i) for i in range(self.config.node_count)]
        return ResourceMonitor(logs, nodes, pool.processes, interval, self.run_dir)

    # Records ----------------------------------------------------------------------------------

    def _log_plan(self) -> None:
        counters = self.counters
        self.log.info(
            "%d mini-batches planned; %d reused%s",
            counters.mini_batches_total,
            counters.mini_batches_reused,
            " (resumed)" if self.resumed else "",
        )
        for note in self.notes:
            self.log.warning("plan: %s", note)

    def _summary(self, status: str, reason: str, logs: RunLogs) -> dict[str, Any]:
        counters, ended = self.counters, time.time()
        output_file = getattr(self, "output_file", None)
        if output_file and self.output_url:
            output_file = self._output_file_url()
        return dict(
            run_id=self.run_id,
            name=self.config.name,
            status=status,
            status_reason=reason,
            reused=False,
            run_dir=str(self.run_dir),
            output=self.output_url or str(self.output_dir),
            output_file=str(output_file) if output_file and status == "Succeeded" else None,
            items_total=counters.items_total,
            items_succeeded=counters.items_succeeded,
            items_failed=counters.items_failed,
            mini_batches_total=counters.mini_batches_total,
            mini_batches_succeeded=counters.mini_batches_succeeded,
            mini_batches_failed=counters.mini_batches_failed,
            mini_batches_reused=counters.mini_batches_reused,
            mini_batches_run=counters.done - counters.mini_batches_reused,
            attempts_retried=counters.attempts_retried,
            workers_started=counters.workers_started,
            started_at=timestamp(self.started_at),
            ended_at=timestamp(ended) if status != "Running" else None,
            elapsed_s=round(ended - self.started_at, 3),
            restarts=self.restarts,
            job_result=str(logs.job_result),
            config=dump_json(self.config),
        )

    def _output_file_url(self) -> str:
        return f"{self.output_url.rstrip('/')}/{self.config.append_row_file_name}"

    def _finish(self, index: RunIndex, logs: RunLogs, log, summary: dict[str, Any]) -> None:
        fingerprints = self.ledger.fingerprints()
        if summary["status"] == "Succeeded" and all(fingerprints):  # whole-step reuse finds it by this key
            index.update(self.run_id, step_key=step_key(self.code, fingerprints))
        self.ledger.set(status=summary["status"])
        self.ledger.close()
        logs.flush()  # the report reads the attempts and events
        summary["report"] = write_run_report(self.run_dir, summary, log) if self.config.report else None
        write_summary(self.run_dir, summary)
        logs.write_result(_job_result(summary))
        if not logs.error_summary.exists():
            logs.write_error_summary("No errors.\n")
        log.info("%s: %s", summary["status"], summary["status_reason"])
        logs.close(log)
        index.update(self.run_id, status=summary["status"], ended_at=time.time(), summary=summary)


# Checks before anything is written -------------------------------------------------------------


def _check(config: ParallelRunConfig, entry_callables: bytes | None) -> tuple[Path | None, dict[str, str]]:
    """Everything a run needs that can be checked up front; returns the entry script and side-input paths."""
    if not config.inputs:
        raise ConfigError("inputs", "no inputs given", "use --input PATH, or inputs: in the step file")
    if config.source_directory and not Path(config.source_directory).is_dir():
        raise ConfigError("source_directory", f"{config.source_directory} is not a folder")
    for dataset in config.inputs:  # a missing one is found before any mini-batch runs, though the plan streams
        for path in dataset.path:
            if not (is_url(path) or GLOB_CHARS & set(path) or os.path.lexists(path)):
                raise InputError(path, "no such file or folder")
    script = None
    if entry_callables is None:
        script = entry_script_path(config)
    side_inputs = {}
    for name, path in config.side_inputs.items():
        if not is_url(path) and not os.path.exists(path):
            raise InputError(path, f"side input {name!r} not found")
        side_inputs[name] = path if is_url(path) else os.path.abspath(path)
    _substitute(config.arguments, config.side_inputs, side_inputs)
    return script, side_inputs


def check_inputs(config: ParallelRunConfig, entry_callables: bytes | None = None) -> None:
    """Check what a run needs, the inputs' existence included, without planning them."""
    _check(config, entry_callables)
    for dataset in config.inputs:
        for path in dataset.path:
            if not is_url(path):
                next(iter_files([path]))


def entry_script_path(config: ParallelRunConfig) -> Path:
    """The entry script (relative to source_directory when one is set), checked to exist and compile."""
    if not config.entry_script:
        raise ConfigError("entry_script", "is required to run a step", "e.g. --entry-script score.py")
    path = Path(config.source_directory or ".") / config.entry_script
    if not path.is_file():
        raise ConfigError("entry_script", f"{path} not found")
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:
        raise ConfigError("entry_script", f"{path} line {exc.lineno}: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError("entry_script", f"{path} cannot be read ({exc})") from None
    return path.absolute()


def _substitute(arguments: list[str], configured: dict[str, str], local: dict[str, str]) -> list[str]:
    """`${side_inputs.NAME}`, or an argument equal to a side input's path, becomes its local path."""
    by_path = {path: local[name] for name, path in configured.items()}

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in local:
            raise ConfigError(
                "arguments", f"${{side_inputs.{name}}} names no side input", f"have: {', '.join(local) or 'none'}"
            )
        return local[name]

    return [by_path.get(arg, _SIDE_INPUT_REF.sub(replace, arg)) for arg in arguments]


def _breaches(config: ParallelRunConfig, summary: dict[str, Any]) -> bool:
    counts = Counters(
        **{
            name: summary.get(name, 0)
            for name in ("mini_batches_total", "mini_batches_succeeded", "mini_batches_failed", "items_failed")
        }
    )
    return threshold_breach(config, counts) is not None


def _drop_stale_cancel(run_dir: Path, started_at: float) -> None:
    """A cancel request left by an earlier run in this folder must not stop this one; one made after
    the run was submitted (step.json) or started must."""
    request = run_dir / CANCEL_FILE
    submitted = run_dir / "step.json"
    since = submitted.stat().st_mtime if submitted.exists() else started_at
    if request.exists() and request.stat().st_mtime < since:
        request.unlink()


def _job_result(summary: dict[str, Any]) -> str:
    lines = [f"Status: {summary['status']}", f"Reason: {summary['status_reason']}", ""]
    run_dir = summary["run_dir"]
    if summary["status"] == "Succeeded":
        lines.append(f"Output: {summary['output_file'] or summary['output']}")
    else:
        lines += [
            "Where to look:",
            f"  {run_dir}/logs/user/error.txt             distinct script errors, with counts",
            f"  {run_dir}/logs/user/error/<node>/processNNN.txt   full tracebacks and hang stack dumps",
            f"  {run_dir}/logs/sys/master_role.txt         the driver's view: retries, failures",
            "",
            "Rerun the same step to resume: finished mini-batches are reused, only the rest run again.",
        ]
    return "\n".join(lines) + "\n"
