"""The worker runtime: the code inside one worker process. It knows neither pipes nor actors.

`WorkerRuntime` imports the entry script, runs `init()` once, `run()` per
mini-batch (loading the data itself and writing the output part), and
`shutdown()` at the end. Failures go back as traceback text, never as pickled
user exceptions: the driver may not be able to import the user's classes.
"""

from __future__ import annotations

import faulthandler
import inspect
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from ..errors import error_line
from ..inputs.fingerprints import file_tokens, fingerprint_of, local_tokens
from ..inputs.members import token_checks
from ..inputs.minibatch import MiniBatch
from ..masking import mask_urls
from ..protocol import Outcome, WorkerSpec
from ..store.logs import error_section, journal_line, mini_batch_tag, timed_out_detail
from ..store.output import Spool, count_rows, row_errors, spool_path
from ..store.space import cannot_write, refused_write, where_it_fits
from . import entry_script
from .context import MiniBatchContext, wants_context
from .downloads import Downloads
from .hooks import worker_hooks
from .limits import Limits
from .read_ahead import ReadAhead
from .script import import_entry

if TYPE_CHECKING:
    import asyncio
    import cProfile

_T = TypeVar("_T")
STACK_DUMP_SIGNAL = signal.SIGUSR1


class WorkerRuntime:
    """init() once, run() per mini-batch, shutdown() once."""

    def __init__(self, spec: WorkerSpec, hang_timeout_hook: Callable[[float | None], None] | None = None):
        self.spec = spec
        self._hang_timeout_hook = hang_timeout_hook
        self._entry: dict[str, Callable[..., Any]] = {}
        self._with_context = False  # run(mini_batch, mini_batch_context): checked once, at start
        self._profiler: cProfile.Profile | None = None
        self._error_file: TextIO | None = None  # opened by start(), as is the journal
        self._journal: TextIO | None = None
        self._spool: Spool | None = None
        self._inputs = ReadAhead(Downloads(prefix=f"parallel-steps-{spec.process_name}-"), spec.read_ahead)
        self._pid = os.getpid()  # in every journal line: a system call each, were it asked
        self.loop: asyncio.AbstractEventLoop | None = None  # where an `async def` init() and run() run
        self.limits = Limits()  # the run() timeouts of the mini-batches an `async def run` has in flight

    def start(self) -> None:
        """Set up logging and the script's environment, import the script, call init(); raises on failure."""
        spec = self.spec
        self._error_file = open(spec.logs.error, "a", encoding="utf-8")
        faulthandler.register(STACK_DUMP_SIGNAL, file=self._error_file, all_threads=True)
        self._journal = open(spec.logs.mini_batches, "a", encoding="utf-8")  # flushed with the results
        if spec.append_row:
            self._spool = Spool(spool_path(spec.parts_dir, f"{spec.node_id}-{spec.process_name}", spec.output_format))
        _set_up_logging(spec.logging_level)
        entry_script.configure(_script_context(spec), self._hang_timeout)
        for hook in worker_hooks():  # what layers above the core provide to the script (the azureml.core names)
            hook.worker_started(spec)
        if spec.profile:
            import cProfile

            self._profiler = cProfile.Profile()
        try:
            self._entry = import_entry(self.spec)
            self._with_context = wants_context(self._entry["run"])
            if any(map(inspect.iscoroutinefunction, self._entry.values())):
                import asyncio

                self.loop = asyncio.new_event_loop()
            if "init" in self._entry:
                self._call(self._entry["init"])
        except BaseException as exc:
            text = self._log_error("init() failed", exc)
            raise InitError(text) from None

    def run(
        self,
        mini_batch: MiniBatch,
        attempt: int,
        on_loaded: Callable[[int], None] | None = None,
        upcoming: MiniBatch | None = None,
    ) -> Outcome:
        """One attempt of one mini-batch: load, run(), append the rows to this worker's spool. The input of
        `upcoming`, the mini-batch queued next, is read while run() works (worker/read_ahead.py).
        Call `flush([outcome])` before the outcome leaves the worker."""
        attempt_ = _Attempt(mini_batch, attempt)
        try:
            data, _, attempt_.during = self._inputs.take(mini_batch)
            if upcoming is not None:
                self._inputs.start(upcoming, during=mini_batch.index)
            self._loaded(attempt_, data, on_loaded)
            result = self._call(self._entry["run"], *self._arguments(data, mini_batch))
            outcome = self._succeeded(attempt_, data, result)
        except Exception as exc:
            outcome = self._failed(attempt_, exc)
        return self._ended(attempt_, outcome)

    async def run_async(
        self,
        mini_batch: MiniBatch,
        attempt: int,
        timeout: float | None,
        on_loaded: Callable[[int], None] | None = None,
    ) -> Outcome:
        """`run` for an `async def run`, one of several in flight on the worker's event loop: the input is
        read on a thread, and past its run() `timeout` (counted from the start, the read included) the
        coroutine is cancelled and the attempt ends timed out; the worker goes on (worker/limits.py)."""
        import asyncio

        attempt_ = _Attempt(mini_batch, attempt)
        limit = None
        try:
            async with self.limits.bound(mini_batch.index, timeout) as limit:
                data, _, attempt_.during = await asyncio.to_thread(self._inputs.take, mini_batch)
                self._loaded(attempt_, data, on_loaded)
                result = await self._entry["run"](*self._arguments(data, mini_batch))
            outcome = self._succeeded(attempt_, data, result)
        except TimeoutError as exc:
            if limit is not None and limit.scope.expired():
                outcome = self._timed_out(attempt_, exc, limit.seconds)
            else:
                outcome = self._failed(attempt_, exc)
        except Exception as exc:
            outcome = self._failed(attempt_, exc)
        return self._ended(attempt_, outcome)

    def _loaded(self, attempt: _Attempt, data: Any, on_loaded: Callable[[int], None] | None) -> None:
        attempt.input_s = time.time() - attempt.started
        attempt.items = count_rows(data)
        if on_loaded and attempt.mini_batch.items is None:
            on_loaded(attempt.items)

    def _arguments(self, data: Any, mini_batch: MiniBatch) -> tuple[Any, ...]:
        return (data, MiniBatchContext(mini_batch)) if self._with_context else (data,)

    def _succeeded(self, attempt: _Attempt, data: Any, result: Any) -> Outcome:
        """The outcome of a run() that returned `result`, its rows appended to the spool."""
        fingerprint, checks = _fingerprint(attempt.mini_batch, data, self.spec.fingerprint_mode)
        outcome = Outcome(True, attempt.items, count_rows(result), fingerprint=fingerprint, checks=checks)
        outcome.row_errors, first = row_errors(result)
        if first is not None:  # the mini-batch succeeds; its error is kept for the ledger and the run's log
            text = first if isinstance(first, str) else json.dumps(first, default=str)
            outcome.error = error_line(f"{outcome.row_errors} rows returned an error, the first: {text}")[:500]
        if self._spool:
            try:
                outcome.part = self._spool.append(result, self.spec.output_format)
            except OSError as exc:
                if not cannot_write(exc):
                    raise
                _not_written(outcome, exc, self._spool.path)
        return outcome

    def _failed(self, attempt: _Attempt, exc: BaseException, how: str = "failed") -> Outcome:
        where = f"run() {mini_batch_tag(attempt.mini_batch.index)} attempt {attempt.number} {how}"
        return Outcome(ok=False, items=attempt.items, error=self._log_error(where, exc))

    def _timed_out(self, attempt: _Attempt, exc: TimeoutError, limit: float | None) -> Outcome:
        """An `async def run` cancelled at its run() timeout: the traceback in the error log shows where it
        waited."""
        self._failed(attempt, exc, "timed out")
        error = f"TimeoutError: {timed_out_detail(limit or 0.0, attempt.mini_batch.index)}; cancelled"
        return Outcome(False, attempt.items, error=error, timed_out=True)

    def _ended(self, attempt: _Attempt, outcome: Outcome) -> Outcome:
        """Times, the journal line, and the mini-batch's copies of files named by URLs removed."""
        self._inputs.release(attempt.mini_batch)
        outcome.started, outcome.input_s = attempt.started, attempt.input_s
        outcome.duration = time.time() - attempt.started
        self._journal_line(attempt.mini_batch, attempt.number, outcome, attempt.during)
        return outcome

    def flush(self, outcomes: Iterable[Outcome] = ()) -> None:
        """Make what the reported `outcomes` point at readable: their output slices and log lines.
        Once per batch of results, not per mini-batch: a write per mini-batch is the hot path's cost.
        When the disk refuses the spool's write, the outcomes with rows fail instead (`_not_written`)."""
        if self._spool:
            try:
                self._spool.flush()
            except OSError as exc:
                if not cannot_write(exc):
                    raise
                for outcome in outcomes:
                    if outcome.part is not None:
                        _not_written(outcome, exc, self._spool.path)
        for stream in (self._journal, sys.stdout, sys.stderr):
            if stream:
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed or broken stdout must not fail the run
                    pass

    def shutdown(self) -> None:
        """Call the script's shutdown() and write the profile; errors are logged, not raised."""
        try:
            if "shutdown" in self._entry:
                self._call(self._entry["shutdown"])
        except Exception as exc:
            self._log_error("shutdown() failed", exc)
        if self._profiler:
            self._profiler.dump_stats(self.spec.logs.profile)
        for hook in worker_hooks():
            hook.worker_stopped()
        if self.loop is not None:
            self.loop.close()
        self.flush()
        if self._spool:
            with where_it_fits():  # what a full disk kept out of it was reported as not written
                self._spool.close()
        self._inputs.close()

    # Internals ------------------------------------------------------------------

    def _opened(self, file: TextIO | None) -> TextIO:
        """A log file start() opened (the error file, the journal): what is written after start()."""
        if file is None:
            raise RuntimeError("the worker's log files are opened by start()")
        return file

    @property
    def is_async(self) -> bool:
        """Whether the entry script's run() is an `async def`: mini-batches go through `run_async`."""
        return inspect.iscoroutinefunction(self._entry.get("run"))

    def run_until_complete(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run `coroutine` on the worker's event loop (made by start() for an `async def` in the script)."""
        if self.loop is None:
            raise RuntimeError("the entry script has no async def: the worker has no event loop")
        return self.loop.run_until_complete(coroutine)

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """init() or shutdown(), an `async def` one run to its end on the worker's loop."""
        if inspect.iscoroutinefunction(function):
            return self.run_until_complete(function(*args))
        if self._profiler is None:
            return function(*args)
        return self._profiler.runcall(function, *args)

    def _hang_timeout(self, seconds: float | None) -> None:
        """`context.hang_timeout(seconds)` from the entry script: the limit of the mini-batch whose task calls it,
        in an `async def run`; else that of the one mini-batch that runs, kept by the pool."""
        if not self.limits.move(seconds) and self._hang_timeout_hook:
            self._hang_timeout_hook(seconds)

    def _log_error(self, where: str, exc: BaseException) -> str:
        """Write the full traceback to this worker's error file (where it fits); return it for the driver."""
        text = mask_urls("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        error_file = self._opened(self._error_file)
        with where_it_fits():
            error_file.write(f"{error_section(f'{where} (pid {os.getpid()})')}{text}\n")
            error_file.flush()
        return text

    def _journal_line(self, mini_batch: MiniBatch, attempt: int, outcome: Outcome, read_during: int | None) -> None:
        items = outcome.items if outcome.items is not None else "?"
        succeeded = min(outcome.returned, outcome.items or outcome.returned) if outcome.ok else 0
        failed = (outcome.items or 0) - succeeded if outcome.items is not None else "?"
        self._opened(self._journal).write(
            journal_line(
                mini_batch.index,
                attempt,
                items,
                succeeded,
                failed,
                outcome.ok,
                outcome.started,
                outcome.duration,
                self._pid,
                outcome.input_s,
                read_during,
            )
        )


class _Attempt:
    """What one attempt has learnt so far, for its outcome and journal line whenever it ends (a plain class:
    one is made per mini-batch)."""

    __slots__ = ("during", "input_s", "items", "mini_batch", "number", "started")

    def __init__(self, mini_batch: MiniBatch, number: int):
        self.mini_batch, self.number, self.started = mini_batch, number, time.time()
        self.items: int | None = mini_batch.items
        self.input_s = 0.0
        self.during: int | None = None  # the mini-batch that ran while its input was read ahead


def _fingerprint(mini_batch: MiniBatch, data: Any, mode: str) -> tuple[str | None, bytes | None]:
    """The fingerprint and file checks of a mini-batch the plan left unfingerprinted: objects by the
    tokens their listing gave (or, mode `content`, by hashing the local copies `data` names), local
    files by their stat."""
    if mini_batch.fingerprint is not None:
        return None, None
    paths = mini_batch.paths
    listed = mini_batch.read.get("tokens") if mini_batch.read else None
    if mode == "content":
        tokens = file_tokens(data if listed else paths, [None] * len(paths), mode)
    elif listed:
        tokens = [token or file_tokens([path], [None], mode)[0] for path, token in zip(paths, listed)]
    else:
        tokens = local_tokens(paths)
    return fingerprint_of(paths, tokens), token_checks(tokens)


def _set_up_logging(level: str) -> None:
    """The root logger at the step's level, to the worker's stdout log."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


def _script_context(spec: WorkerSpec) -> entry_script.WorkerContext:
    """What the entry script's context (`azureml_user`'s) says of this worker."""
    return entry_script.WorkerContext(
        log_dir=str(spec.logs.entry_script_log.parent),
        entry_script_log=str(spec.logs.entry_script_log),
        output_dir=spec.output_dir,
        working_dir=os.getcwd(),
        agent_name=spec.process_name,
        node_id=spec.node_id,
        side_inputs=spec.side_inputs,
        logging_level=spec.logging_level,
    )


def _not_written(outcome: Outcome, exc: OSError, spool: str) -> None:
    """An attempt whose rows the spool could not write (a full disk, an I/O error, a read-only folder) fails,
    naming the spool; the driver then stops the run (a retry cannot make space, nor mend a disk)."""
    outcome.ok, outcome.part, outcome.refused_write = False, None, (exc.errno or 0, spool)
    outcome.error = str(refused_write(exc.errno or 0, spool))


class InitError(Exception):
    """init() or the import of the entry script failed; the text is the traceback."""
