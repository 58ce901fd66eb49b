"""The worker runtime: the code inside one worker process. It knows neither pipes nor actors.

`WorkerRuntime` imports the entry script, runs `init()` once, `run()` per
mini-batch (loading the data itself and writing the output part), and
`shutdown()` at the end. Failures go back as traceback text, never as pickled
user exceptions: the driver may not be able to import the user's classes.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import inspect
import json
import importlib.machinery
import importlib.util
import logging
import os
import pickle
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import error_line
from ..inputs.fingerprints import file_tokens, fingerprint_of, local_tokens
from ..inputs.members import token_checks
from ..inputs.minibatch import MiniBatch
from ..masking import mask_urls
from ..protocol import Outcome, WorkerSpec
from ..storage.objects import is_url
from ..store.logs import error_section, journal_line, mini_batch_tag, timed_out_detail
from ..store.output import Spool, count_rows, row_errors, spool_path
from ..store.space import disk_full, out_of_space, where_it_fits
from . import entry_script
from .context import MiniBatchContext, wants_context
from .downloads import Downloads
from .hooks import worker_hooks
from .read_ahead import ReadAhead

if TYPE_CHECKING:
    import asyncio
    import cProfile

STACK_DUMP_SIGNAL = signal.SIGUSR1
_MODELS = ".models"  # models' copies beside side inputs' (no side input name starts with a dot)


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
        self._limits: dict[int, _Limit] = {}  # the run() timeouts of the mini-batches in flight, by index
        self.on_limits: Callable[[], None] | None = None  # told when an entry script changes one (hang_timeout)

    def start(self) -> None:
        """Set up logging and the script's environment, import the script, call init(); raises on failure."""
        spec = self.spec
        self._error_file = open(spec.logs.error, "a", encoding="utf-8")
        faulthandler.register(STACK_DUMP_SIGNAL, file=self._error_file, all_threads=True)
        self._journal = open(spec.logs.mini_batches, "a", encoding="utf-8")  # flushed with the results
        if spec.append_row:
            self._spool = Spool(spool_path(spec.parts_dir, f"{spec.node_id}-{spec.process_name}", spec.output_format))
        root = logging.getLogger()
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(spec.logging_level)
        entry_script.configure(
            entry_script.WorkerContext(
                log_dir=str(spec.logs.entry_script_log.parent),
                entry_script_log=str(spec.logs.entry_script_log),
                output_dir=spec.output_dir,
                working_dir=os.getcwd(),
                agent_name=spec.process_name,
                node_id=spec.node_id,
                side_inputs=spec.side_inputs,
                logging_level=spec.logging_level,
            ),
            self._hang_timeout,
        )
        for hook in worker_hooks():  # what layers above the core provide to the script (the azureml.core names)
            hook.worker_started(spec)
        if spec.profile:
            import cProfile

            self._profiler = cProfile.Profile()
        try:
            self._entry = self._import_entry()
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
        coroutine is cancelled and the attempt ends timed out; the worker goes on (worker/in_flight.py)."""
        import asyncio

        attempt_ = _Attempt(mini_batch, attempt)
        scope = asyncio.timeout(timeout)  # counts from now
        self._limits[mini_batch.index] = _Limit(scope, timeout, asyncio.current_task())
        self._limits_changed()
        try:
            async with scope:
                data, _, attempt_.during = await asyncio.to_thread(self._inputs.take, mini_batch)
                self._loaded(attempt_, data, on_loaded)
                result = await self._entry["run"](*self._arguments(data, mini_batch))
            outcome = self._succeeded(attempt_, data, result)
        except TimeoutError as exc:
            limit = self._limits[mini_batch.index].seconds
            outcome = self._timed_out(attempt_, exc, limit) if scope.expired() else self._failed(attempt_, exc)
        except Exception as exc:
            outcome = self._failed(attempt_, exc)
        finally:
            del self._limits[mini_batch.index]
            self._limits_changed()
        return self._ended(attempt_, outcome)

    def deadline(self) -> float | None:
        """The earliest run() deadline of the mini-batches in flight (`asyncio` loop time, which is
        `time.monotonic()`); None when none has one."""
        return min((when for limit in self._limits.values() if (when := limit.scope.when()) is not None), default=None)

    def _loaded(self, attempt: _Attempt, data: Any, on_loaded: Callable[[int], None] | None) -> None:
        attempt.input_s = time.time() - attempt.started
        attempt.items = count_rows(data)
        if on_loaded and attempt.mini_batch.items is None:
            on_loaded(attempt.items)

    def _arguments(self, data: Any, mini_batch: MiniBatch) -> tuple[Any, ...]:
        return (data, MiniBatchContext(mini_batch)) if self._with_context else (data,)

    def _succeeded(self, attempt: _Attempt, data: Any, result: Any) -> Outcome:
        """The outcome of a run() that returned `result`, its rows appended to the spool."""
        fingerprint, checks = self._fingerprint(attempt.mini_batch, data)
        outcome = Outcome(True, attempt.items, count_rows(result), fingerprint=fingerprint, checks=checks)
        outcome.row_errors, first = row_errors(result)
        if first is not None:  # the mini-batch succeeds; its error is kept for the ledger and the run's log
            text = first if isinstance(first, str) else json.dumps(first, default=str)
            outcome.error = error_line(f"{outcome.row_errors} rows returned an error, the first: {text}")[:500]
        if self._spool:
            try:
                outcome.part = self._spool.append(result, self.spec.output_format)
            except OSError as exc:
                if not out_of_space(exc):
                    raise
                _not_written(outcome, self._spool.path)
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
        When the disk is too full for the spool, the outcomes with rows fail instead (`_not_written`)."""
        if self._spool:
            try:
                self._spool.flush()
            except OSError as exc:
                if not out_of_space(exc):
                    raise
                for outcome in outcomes:
                    if outcome.part is not None:
                        _not_written(outcome, self._spool.path)
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

    def _import_entry(self) -> dict[str, Callable[..., Any]]:
        spec = self.spec
        if spec.entry_callables is not None:
            functions = pickle.loads(spec.entry_callables)
            sys.argv = ["parallel_run", *list(spec.arguments)]
            return {k: v for k, v in functions.items() if v is not None}
        if spec.entry_script is None:
            raise ValueError("the worker was given neither an entry script nor its functions")
        script = Path(spec.entry_script)
        for folder in dict.fromkeys([spec.source_directory, str(script.parent)]):
            if folder and folder not in sys.path:
                sys.path.insert(0, folder)
        sys.argv = [str(script), *list(spec.arguments)]
        module = _import_script(script)
        if not callable(getattr(module, "run", None)):
            raise AttributeError(f"{script} defines no run(mini_batch) function")
        return {
            name: getattr(module, name) for name in ("init", "run", "shutdown") if callable(getattr(module, name, None))
        }

    def _opened(self, file: TextIO | None) -> TextIO:
        """A log file start() opened (the error file, the journal): what is written after start()."""
        if file is None:
            raise RuntimeError("the worker's log files are opened by start()")
        return file

    def _fingerprint(self, mini_batch: MiniBatch, data: Any) -> tuple[str | None, bytes | None]:
        """The fingerprint and file checks of a mini-batch the plan left unfingerprinted: objects by the
        tokens their listing gave (or, mode `content`, by hashing the local copies `data` names), local
        files by their stat."""
        if mini_batch.fingerprint is not None:
            return None, None
        paths, mode = mini_batch.paths, self.spec.fingerprint_mode
        listed = mini_batch.read.get("tokens") if mini_batch.read else None
        if mode == "content":
            tokens = file_tokens(data if listed else paths, [None] * len(paths), mode)
        elif listed:
            tokens = [token or file_tokens([path], [None], mode)[0] for path, token in zip(paths, listed)]
        else:
            tokens = local_tokens(paths)
        return fingerprint_of(paths, tokens), token_checks(tokens)

    @property
    def is_async(self) -> bool:
        """Whether the entry script's run() is an `async def`: mini-batches go through `run_async`."""
        return inspect.iscoroutinefunction(self._entry.get("run"))

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """init() or shutdown(), an `async def` one run to its end on the worker's loop."""
        if inspect.iscoroutinefunction(function) and self.loop is not None:
            return self.loop.run_until_complete(function(*args))
        if self._profiler is None:
            return function(*args)
        return self._profiler.runcall(function, *args)

    def _hang_timeout(self, seconds: float | None) -> None:
        """`context.hang_timeout(seconds)` from the entry script: in an `async def run`, the limit of the
        mini-batch whose task calls it, kept here (negative: its run() timeout again, from now); else the
        limit of the one mini-batch that runs, kept by the pool."""
        import asyncio

        limit = None
        if self._limits:
            task = asyncio.current_task(self.loop) if self.loop is not None and self.loop.is_running() else None
            limit = next((limit for limit in self._limits.values() if limit.task is task), None)
        if limit is None:
            if self._hang_timeout_hook:
                self._hang_timeout_hook(seconds)
            return
        seconds = limit.seconds if seconds is not None and seconds < 0 else seconds
        loop_time = asyncio.get_running_loop().time()
        limit.scope.reschedule(None if seconds is None else loop_time + seconds)
        limit.seconds = seconds
        self._limits_changed()

    def _limits_changed(self) -> None:
        if self.on_limits:
            self.on_limits()

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


@dataclass
class _Attempt:
    """What one attempt has learnt so far, for its outcome and journal line whenever it ends."""

    mini_batch: MiniBatch
    number: int
    started: float = dataclasses.field(default_factory=time.time)
    items: int | None = None
    input_s: float = 0.0
    during: int | None = None  # the mini-batch that ran while its input was read ahead

    def __post_init__(self) -> None:
        self.items = self.mini_batch.items


@dataclass
class _Limit:
    """The run() timeout of a mini-batch in flight in an `async def run`: its `asyncio.timeout` and its task."""

    scope: asyncio.Timeout
    seconds: float | None
    task: asyncio.Task[Any] | None = None


def _not_written(outcome: Outcome, spool: str) -> None:
    """An attempt whose rows the spool could not write for lack of space fails, naming the spool; the
    driver then stops the run (a retry cannot make space)."""
    outcome.ok, outcome.part, outcome.no_space = False, None, spool
    outcome.error = str(disk_full(spool))


def _import_script(script: Path) -> ModuleType:
    """The entry script as a module named after it, whatever its file name ends with (`score`, `score.txt`:
    the checks compile any file as Python, so the worker imports any)."""
    loader = importlib.machinery.SourceFileLoader(script.stem, str(script))
    module_spec = importlib.util.spec_from_file_location(script.stem, script, loader=loader)
    if module_spec is None:  # not with a loader given (the type says it may be)
        raise ImportError(f"cannot import {script}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[script.stem] = module
    loader.exec_module(module)
    return module


def localize_side_inputs(spec: WorkerSpec, copy_paths: bool) -> WorkerSpec:
    """Copy side inputs and models once to this machine and point the spec (and arguments naming side
    inputs) at the copies: those named by URLs always, local paths too with `copy_paths` (Ray nodes may
    not share a filesystem). Copies live under side_inputs_dir()/<run id>/<name>/ (models under
    .models/<name>/), removed when the run ends."""
    root = side_inputs_root(spec)
    side_inputs = _copies(spec.side_inputs, root, copy_paths)
    models = _copies(spec.models, root / _MODELS, copy_paths)
    if not side_inputs and not models:
        return spec
    moves = sorted(((spec.side_inputs[name], path) for name, path in side_inputs.items()), key=lambda m: -len(m[0]))
    return dataclasses.replace(
        spec,
        side_inputs={**spec.side_inputs, **side_inputs},
        models={**spec.models, **models},
        arguments=[_repoint(arg, moves) for arg in spec.arguments],
    )


def _copies(entries: dict[str, str], root: Path, copy_paths: bool) -> dict[str, str]:
    """name -> local copy of the entries that need one (URLs; local paths too with `copy_paths`)."""
    wanted = {name: path for name, path in entries.items() if copy_paths or is_url(path)}
    if not wanted:  # most steps: no import of asyncio and fsspec (a tenth of a second of each worker's start)
        return {}
    from ..storage.fetch import copy_once

    return {name: copy_once(path, root / name) for name, path in wanted.items()}


def side_inputs_dir() -> Path:
    """Where every run's side-input copies go on this machine. Asked when needed, not when the module is
    imported: the first question for the temporary folder writes a probe file in it (tempfile's check that
    it is writable), which a worker killed at that moment would leave behind."""
    return Path(tempfile.gettempdir()) / "parallel_steps" / "side_inputs"


def side_inputs_root(spec: WorkerSpec) -> Path:
    """This run's folder of side-input copies on a machine (the run folder holds `parts_dir`)."""
    return side_inputs_dir() / Path(spec.parts_dir).parent.name


def copies_root(spec: WorkerSpec, copy_paths: bool) -> Path | None:
    """Where `localize_side_inputs(spec, copy_paths)` puts copies of side inputs and models on a
    machine, when it makes any: the folder a pool removes when the run ends."""
    entries = [*spec.side_inputs.values(), *spec.models.values()]
    return side_inputs_root(spec) if any(copy_paths or is_url(path) for path in entries) else None


def _repoint(argument: str, moves: list[tuple[str, str]]) -> str:
    """Replace a side input's original path inside an argument (whole path components only)."""
    for source, local in moves:
        literal = local.replace("\\", "\\\\")  # a replacement reads backslashes as escapes
        argument = re.sub(re.escape(source) + r"(?=$|[/\s,;:])", literal, argument)
    return argument


class InitError(Exception):
    """init() or the import of the entry script failed; the text is the traceback."""
