"""The Ray side of a worker: one `ParallelStepsWorker` actor per worker, and the mailbox.

The actor sets up the worker environment and log files like a local worker process,
then drives a `WorkerRuntime` in its main thread (entry scripts that install signal
handlers keep working). Messages it sends while run() is still going (items
loaded, a changed hang timeout, memory above the limit) go through one small
`Mailbox` actor, so the pool waits on a single extra ref. Workers write their logs
and output parts straight into the run directory, which every node must mount at
the same path.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import ray

from ..inputs.minibatch import MiniBatch
from ..protocol import (
    FromWorker,
    Outcome,
    WorkerHangTimeout,
    WorkerInitFailed,
    WorkerLoaded,
    WorkerLogPaths,
    WorkerOverMemory,
    WorkerReady,
    WorkerSpec,
)
from ..worker.runtime import InitError, WorkerRuntime, localize_side_inputs
from .base import tree_rss
from .slots import MEMORY_CHECK_S

#: The actor's own stack dump fires this long after its deadline, so that it follows the header the pool
#: writes at the deadline (as the pool sees it); the pool kills it `slots.DUMP_GRACE_S` after that.
DUMP_DELAY_S = 0.5


class ParallelStepsWorker:
    """One worker inside a Ray actor: sets up the worker environment and log files, then drives a WorkerRuntime.

    Runs in the actor's main thread, like a local worker process, so entry scripts that
    install signal handlers keep working. Failures come back as traceback text.
    """

    def __init__(
        self,
        worker_id: str,
        spec: WorkerSpec,
        environment: dict[str, str],
        gpu: bool,
        mailbox: Any,
        memory_limit: int | None,
        cwd: str,
    ):
        self._id, self._spec, self._environment, self._gpu = worker_id, spec, environment, gpu
        self._mailbox, self._memory_limit, self._cwd = mailbox, memory_limit, cwd
        self._runtime: WorkerRuntime | None = None
        self._current: tuple[int, int] | None = None
        self._timeout: float | None = None
        self._dump_file: TextIO | None = None

    def start(self) -> WorkerReady | WorkerInitFailed:
        """Environment, log redirection, side-input copies, then the script's init()."""
        os.environ.update(self._environment)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if self._gpu else None
        problem = _shared_run_dir_problem(self._spec)
        if problem:
            return WorkerInitFailed(problem, os.getpid(), gpu)
        _redirect_output(self._spec.logs)
        if os.path.isdir(self._cwd):
            os.chdir(self._cwd)
        try:
            spec = localize_side_inputs(self._spec, copy_paths=True)  # nodes may not share a filesystem
        except Exception as exc:
            error = f"side inputs could not be copied to this node: {type(exc).__name__}: {exc}"
            return WorkerInitFailed(error, os.getpid(), gpu)
        self._dump_file = open(spec.logs.error, "a", encoding="utf-8")
        self._runtime = WorkerRuntime(spec, hang_timeout_hook=self._on_hang_timeout)
        try:
            self._runtime.start()
        except InitError as exc:
            return WorkerInitFailed(str(exc), os.getpid(), gpu)
        finally:
            _flush()
        # The first call to another actor connects to it: done here, not in the first run()'s timed post.
        ray.get(self._mailbox.ping.remote())
        if self._memory_limit:
            threading.Thread(target=self._watch_memory, daemon=True, name="parallel-steps-memory").start()
        return WorkerReady(os.getpid(), gpu)

    def run(self, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> Outcome:
        """One attempt; a faulthandler watchdog writes the stacks if it outlives its deadline."""
        runtime = self._started()
        self._current, self._timeout = (mini_batch.index, attempt), timeout
        self._arm_dump(timeout)
        outcomes: list[Outcome] = []
        try:
            outcomes.append(runtime.run(mini_batch, attempt, on_loaded=self._loaded))
        finally:
            faulthandler.cancel_dump_traceback_later()
            self._current = None
            runtime.flush(outcomes)  # may turn the outcome into a failure: a full disk kept its rows out
        return outcomes[0]

    def _started(self) -> WorkerRuntime:
        if self._runtime is None:
            raise RuntimeError("run() before start()")
        return self._runtime

    def shutdown(self, timeout: float) -> None:
        """The script's shutdown(); its stacks are dumped if it takes longer than `timeout`."""
        self._arm_dump(timeout)
        try:
            if self._runtime is not None:
                self._runtime.shutdown()
        finally:
            faulthandler.cancel_dump_traceback_later()
            _flush()

    def _arm_dump(self, seconds: float | None) -> None:
        faulthandler.cancel_dump_traceback_later()
        if seconds and self._dump_file is not None:
            faulthandler.dump_traceback_later(seconds + DUMP_DELAY_S, file=self._dump_file)

    def _loaded(self, items: int) -> None:
        if self._current is not None:
            self._post(WorkerLoaded(*self._current, items))

    def _on_hang_timeout(self, seconds: float | None) -> None:
        self._arm_dump(self._timeout if seconds is not None and seconds < 0 else seconds)
        if self._current is not None:
            self._post(WorkerHangTimeout(*self._current, seconds))

    def _post(self, message: FromWorker) -> None:
        self._mailbox.post.remote(self._id, message)

    def _watch_memory(self) -> None:
        """Tell the pool once run() goes above worker_memory_limit; the pool kills the actor."""
        told = None
        while True:
            time.sleep(MEMORY_CHECK_S)
            rss = tree_rss(os.getpid())
            current = self._current
            if current is not None and current != told and rss > (self._memory_limit or 0):
                self._post(WorkerOverMemory(*current, rss))
                told = current


class Mailbox:
    """Messages workers send during run(); the pool keeps one `take()` in flight and wakes when it returns."""

    def __init__(self) -> None:
        self._messages: list[tuple[str, FromWorker]] = []  # (sender's worker id, message)
        self._posted = asyncio.Event()

    async def post(self, worker_id: str, message: FromWorker) -> None:
        self._messages.append((worker_id, message))
        self._posted.set()

    async def ping(self) -> None:
        """Nothing: a worker's first call, so that its posts during run() find the connection open."""

    async def take(self) -> list[tuple[str, FromWorker]]:
        await self._posted.wait()
        self._posted.clear()
        messages, self._messages = self._messages, []
        return messages


def _shared_run_dir_problem(spec: WorkerSpec) -> str | None:
    if os.path.isdir(spec.parts_dir):
        return None
    return (
        f"the run directory {Path(spec.parts_dir).parent} is not visible on this node "
        f"({ray.util.get_node_ip_address()}): put run_root on a filesystem every node mounts at the same "
        f"path (see docs/multinode.md)"
    )


def _redirect_output(logs: WorkerLogPaths) -> None:
    """Point fds 1 and 2 at the worker's log files, so the script's subprocesses write there too."""
    _flush()
    for fd, path in ((1, logs.stdout), (2, logs.stderr)):
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        os.dup2(target, fd)
        os.close(target)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def remove_side_inputs(folder: Path) -> None:
    """Runs on each node when the run ends: its copies, locks and any partial copy go."""
    shutil.rmtree(folder, ignore_errors=True)
