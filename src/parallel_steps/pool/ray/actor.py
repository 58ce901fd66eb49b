"""The Ray side of a worker: one `ParallelStepsWorker` actor per worker.

The actor sets up the worker environment and log files like a local worker process,
then drives a `WorkerRuntime` in its main thread (entry scripts that install signal
handlers keep working). Each call runs several mini-batches (`run_many`) and returns
their outcomes together; an `async def run` runs those of a call at once, up to
`max_concurrency_per_worker`. Messages it sends while a call is still going (a mini-batch
that runs long, items loaded, a changed hang timeout, memory above the limit, the end
of a mini-batch said to run: watch.py) go through one small `Mailbox` actor
(mailbox.py), so the pool waits on a single extra ref; the end of each call is
noted where the pool finds it after the actor died (ends.py). Workers write their logs
and output parts straight into the run directory, which every node must mount at the
same path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

import ray

from ...inputs.minibatch import MiniBatch
from ...protocol import ActorPost, Outcome, WorkerEnded, WorkerInitFailed, WorkerLogPaths, WorkerReady, WorkerSpec
from ...worker.downloads import FOLDER_VARIABLE
from ...worker.runtime import InitError, WorkerRuntime
from ...worker.side_inputs import copy_failure, downloads_folder, localize_side_inputs, remove_copies
from .ends import FileEnds, MailboxEnds, ends_for
from .watch import Watch, arm_dump


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
        ends_path: str | None,
        memory_limit: int | None,
        cwd: str,
    ):
        self._id, self._spec, self._environment, self._gpu = worker_id, spec, environment, gpu
        self._mailbox, self._ends_path, self._memory_limit, self._cwd = mailbox, ends_path, memory_limit, cwd
        self._runtime: WorkerRuntime | None = None
        self._watch: Watch | None = None
        self._ends: FileEnds | MailboxEnds | None = None  # where each call's end is noted (ends.py)
        self._dump_file: TextIO | None = None

    def start(self) -> WorkerReady | WorkerInitFailed:
        """Environment, log redirection, side-input copies, then the script's init()."""
        os.environ.update(self._environment)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if self._gpu else None
        problem = _shared_run_dir_problem(self._spec)
        if problem:
            return WorkerInitFailed(problem, os.getpid(), gpu)
        self._ends = ends_for(self._ends_path, self._mailbox, self._id)
        _redirect_output(self._spec.logs)
        if os.path.isdir(self._cwd):
            os.chdir(self._cwd)
        try:
            spec = localize_side_inputs(self._spec, copy_paths=True)  # nodes may not share a filesystem
        except Exception as exc:
            error = f"side inputs could not be copied to this node: {copy_failure(exc)}"
            return WorkerInitFailed(error, os.getpid(), gpu)
        os.environ[FOLDER_VARIABLE] = str(downloads_folder(spec))  # made when first needed; removed with the run
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
        self._watch = Watch(self._post, self._dump_file, self._memory_limit)
        return WorkerReady(os.getpid(), gpu)

    def run_many(self, call: int, attempts: list[tuple[MiniBatch, int, float | None]]) -> list[tuple[int, Outcome]]:
        """(mini-batch, attempt, run() timeout) triples in order, in the pool's call number `call`; returns their
        (index, outcome) pairs. What the pool must hear of before the call returns, the watch tells it
        (watch.py). Each call's end is noted (ends.py), and the next call starts once the note is in."""
        runtime, watch, ends = self._started()
        ends.wait()
        results: list[tuple[int, Outcome]] = []
        told = 0  # how many of `results` the pool has already
        watch.call([timeout for _, _, timeout in attempts])
        try:
            if runtime.is_async:  # at once, up to max_concurrency_per_worker
                results = runtime.run_until_complete(_run_concurrently(runtime, attempts))
            else:
                for position, (mini_batch, attempt, _) in enumerate(attempts):
                    upcoming = attempts[position + 1][0] if position + 1 < len(attempts) else None  # read meanwhile
                    watch.begin(position, mini_batch.index, attempt)
                    outcome = runtime.run(mini_batch, attempt, on_loaded=watch.loaded, upcoming=upcoming)
                    results.append((mini_batch.index, outcome))
                    if watch.end(position):
                        told = self._tell_end(runtime, mini_batch.index, attempt, results, told)
        finally:
            watch.idle()
            runtime.flush(outcome for _, outcome in results[told:])  # a full disk may turn outcomes into failures
        ends.note(call)
        return results

    def _tell_end(
        self, runtime: WorkerRuntime, index: int, attempt: int, results: list[tuple[int, Outcome]], told: int
    ) -> int:
        """A mini-batch said to run ended: its outcome and those before it not told yet go to the pool, their rows
        flushed first; waited for, so that the pool has them before the next one starts. Returns how many are told."""
        runtime.flush(outcome for _, outcome in results[told:])
        ray.get(self._mailbox.post.remote(self._id, WorkerEnded(index, attempt, results[told:])))
        return len(results)

    def _started(self) -> tuple[WorkerRuntime, Watch, FileEnds | MailboxEnds]:
        if self._runtime is None or self._watch is None or self._ends is None:
            raise RuntimeError("run_many() before start()")
        return self._runtime, self._watch, self._ends

    def shutdown(self, timeout: float) -> None:
        """The script's shutdown(); its stacks are dumped if it takes longer than `timeout`."""
        arm_dump(self._dump_file, timeout)
        try:
            if self._runtime is not None:
                self._runtime.shutdown()
        finally:
            arm_dump(self._dump_file, None)
            _flush()

    def _on_hang_timeout(self, seconds: float | None) -> None:
        if self._watch is not None:
            self._watch.hang_timeout(seconds)

    def _post(self, message: ActorPost) -> None:
        self._mailbox.post.remote(self._id, message)


async def _run_concurrently(
    runtime: WorkerRuntime, attempts: list[tuple[MiniBatch, int, float | None]]
) -> list[tuple[int, Outcome]]:
    """The mini-batches of one call to an `async def run`, up to `max_concurrency_per_worker` in flight, each
    with its own run() timeout (`WorkerRuntime.run_async`); their (index, outcome) pairs in call order."""
    import asyncio

    places = asyncio.Semaphore(runtime.spec.max_concurrency)

    async def run_one(mini_batch: MiniBatch, attempt: int, timeout: float | None) -> tuple[int, Outcome]:
        async with places:
            return mini_batch.index, await runtime.run_async(mini_batch, attempt, timeout)

    return list(await asyncio.gather(*(run_one(*attempt) for attempt in attempts)))


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
    """Runs on each node when the run ends: its copies, locks and any partial copy go, and the folders above
    them in the temporary folder when no other run's are there."""
    remove_copies(folder)
