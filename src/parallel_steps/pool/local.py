"""The local worker pool: worker processes on this machine, supervised from one loop.

    driver ──submit──▶ LocalWorkerPool ──(duplex pipe per worker)──▶ worker process
       ▲                   │  polls: every pipe and every pidfd sentinel;
       └── next_events ◀───┘  timeout = the nearest deadline

One owner, one loop, no locks: only the pool holds the worker processes. A worker
runs the mini-batches it was given in order, one at a time; a short queue lets
it start the next one without waiting for the driver, and results of quick
ones come back a few at a time. Its marker (a little shared memory) says which
mini-batch it runs and since when, so a deadline counts from the real start,
and a sentinel (pidfd) firing the moment it dies maps to exactly that
mini-batch; the others it held go back unstarted. `node_count > 1` simulates
nodes on one machine.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from ..inputs.minibatch import MiniBatch
from ..inputs.storage import is_url
from ..protocol import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    LossReason,
    Lost,
    Ready,
    WorkerInfo,
)
from ..store.logs import hang_summary, note_hang, stderr_tail
from ..worker.runtime import side_inputs_root
from .base import (
    PoolSettings,
    WorkerPool,
    WorkerState,
    exit_name,
    next_wakeup,
    out_of_memory_detail,
    shutdown_cut_off_detail,
    timed_out_detail,
    tree_rss,
)
from .local_process import WorkerProcess

_DUMP_GRACE_S = 1.0  # time a hung worker gets to write its stacks before SIGKILL
_MEMORY_CHECK_S = 1.0
_LIKELY_OOM_RSS = 1 << 30
_MARKER_CHECK_S = 0.05  # how soon to look again for the start of a queued mini-batch
_REAP_S = 5.0  # the longest a SIGKILLed worker may take to be gone


class LocalWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` worker processes on this machine."""

    def __init__(self, settings: PoolSettings):
        super().__init__(settings)
        self._handles: dict[str, WorkerProcess] = {}
        self._events: collections.deque[Event] = collections.deque()
        self._free_gpus = {n: list(settings.gpu_ids) for n in range(settings.node_count)}
        self._poller = select.poll()  # registered once per descriptor, not rebuilt per wait
        self._by_fd: dict[int, tuple[str, WorkerProcess]] = {}
        self._next_memory_check = 0.0
        self._side_input_copies: Path | None = None  # where workers copy side inputs named by URLs
        self._closed = False

    # Starting workers -----------------------------------------------------------------

    def start(self) -> None:
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _spawn(self, node: int, slot: int) -> None:
        info = self._new_worker(node, slot)
        gpus = self._free_gpus[node]
        gpu = gpus.pop(0) if gpus else None
        spec = self.settings.make_spec(node, info.node_id, info.process_name)
        if any(is_url(path) for path in spec.side_inputs.values()):
            self._side_input_copies = side_inputs_root(spec)
        environment = self.settings.worker_environment(node, info.process_name, gpu)
        worker = WorkerProcess.start(info, spec, environment)
        worker.info = info = dataclasses.replace(info, pid=worker.process.pid, gpu=gpu)
        self._handles[info.id] = worker
        self._watch(worker.conn.fileno(), "conn", worker)
        self._watch(worker.sentinel, "sentinel", worker)

    def _watch(self, fd: int, kind: str, worker: WorkerProcess) -> None:
        self._poller.register(fd, select.POLLIN)
        self._by_fd[fd] = (kind, worker)

    def _unwatch(self, fd: int) -> None:
        if self._by_fd.pop(fd, None):
            self._poller.unregister(fd)

    def replace(self, worker: WorkerInfo) -> None:
        self._check_open()
        self._spawn(worker.node_index, worker.slot)

    # Feeding and waiting ----------------------------------------------------------------

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        handle = self._ready(worker)
        if handle is None:
            return
        handle.queue[mini_batch.index] = timeout
        handle.outbox.append((mini_batch, attempt))

    def next_events(self, timeout: float) -> list[Event]:
        for handle in self._handles.values():  # what was submitted since the last look: one message each
            if handle.outbox and handle.pipe_open:
                handle.frame_outbox()
                self._poller.modify(handle.conn.fileno(), handle.write())
        self._gather(0 if self._events else timeout)
        events = list(self._events)
        self._events.clear()
        return events

    def _gather(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            self._enforce_deadlines(now)
            timeout_ms = math.ceil(max(0.0, min(end, self._next_wakeup(now)) - now) * 1000)
            for fd, mask in self._poller.poll(timeout_ms):
                self._handle_ready(fd, mask)
            if self._events or time.monotonic() >= end:
                return

    def _next_wakeup(self, now: float) -> float:
        times: list[float | None] = []
        for handle in self._handles.values():
            times.append(handle.kill_at)
            if handle.queue:
                running = handle.running()
                # a queued mini-batch may start any moment: look again soon to learn its deadline
                times += [running[1] if running else now + _MARKER_CHECK_S, self._next_memory_check]
        return next_wakeup(now, times)

    def _handle_ready(self, fd: int, mask: int) -> None:
        if fd not in self._by_fd:
            return  # unwatched by an earlier event of this poll
        kind, handle = self._by_fd[fd]
        if kind == "conn":
            if mask & select.POLLOUT:
                self._poller.modify(fd, handle.write())
            if mask & ~select.POLLOUT and handle.pipe_open:
                self._receive(handle)
        elif kind == "sentinel":
            self._reap(handle)

    def _receive(self, handle: WorkerProcess) -> None:
        """Read one message; the poller reports the pipe again while more are waiting."""
        try:
            self._on_message(handle, handle.conn.recv())
        except (EOFError, OSError):
            self._close_pipe(handle)  # the sentinel tells the rest

    def _close_pipe(self, handle: WorkerProcess) -> None:
        if handle.pipe_open:
            self._unwatch(handle.conn.fileno())
            handle.close_pipe()

    def _on_message(self, handle: WorkerProcess, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            handle.state = WorkerState.READY
            self._events.append(Ready(handle.info))
        elif kind == "init_failed":
            handle.state = WorkerState.STOPPING
            self._events.append(InitFailed(handle.info, message[1]))
        elif kind == "loaded":
            self._events.append(ItemsLoaded(handle.info, message[1], message[2]))
        elif kind == "hang_timeout":
            self._set_hang_timeout(handle, message[1])
        elif kind == "results":
            for index, outcome in message[1]:
                if handle.queue.pop(index, False) is not False:
                    self._events.append(Finished(handle.info, index, outcome))

    def _set_hang_timeout(self, handle: WorkerProcess, seconds: float | None) -> None:
        index, _ = handle.marker.get()
        if index not in handle.queue:
            return
        if seconds is not None and seconds < 0:
            seconds = handle.queue[index]
        handle.extended = (index, time.monotonic() + seconds if seconds else None)
        self._events.append(HangTimeoutChanged(handle.info, seconds))

    # Losing workers ---------------------------------------------------------------------

    def _enforce_deadlines(self, now: float) -> None:
        for handle in self._handles.values():
            if handle.kill_at is not None and now >= handle.kill_at:
                handle.kill_at = None
                handle.kill()
            elif handle.queue and not handle.loss and (running := handle.running()):
                index, deadline = running
                if deadline is not None and now >= deadline:
                    self._dump_and_kill(
                        handle, LossReason.TIMED_OUT, timed_out_detail(handle.queue[index] or 0.0, index)
                    )
        if now >= self._next_memory_check:
            self._next_memory_check = now + _MEMORY_CHECK_S
            self._sample_memory()

    def _dump_and_kill(self, handle: WorkerProcess, reason: LossReason, detail: str) -> None:
        """Write the worker's Python stacks (faulthandler) to its error log, then kill it after a grace."""
        handle.loss, handle.loss_detail = reason, detail
        note_hang(handle.logs, detail)
        if handle.dump_stacks():
            handle.kill_at = time.monotonic() + _DUMP_GRACE_S

    def _sample_memory(self) -> None:
        """Sample busy workers' memory: enforce worker_memory_limit, and remember the last RSS so a
        SIGKILL from the kernel's OOM killer can be recognised."""
        limit = self.settings.memory_limit
        for handle in self._handles.values():
            if not handle.queue or handle.loss:
                continue
            rss = handle.last_rss = tree_rss(handle.process.pid)
            if limit and rss > limit:
                handle.loss, handle.loss_detail = LossReason.OUT_OF_MEMORY, out_of_memory_detail(rss, limit)
                handle.kill()

    def _reap(self, handle: WorkerProcess) -> None:
        """The worker process exited: free its slot and GPU, and say what it held."""
        exit_code = handle.process.wait()
        handle.kill()  # anything it started
        while handle.pipe_open and handle.conn.poll():
            self._receive(handle)  # results it sent before it died still count
        previous, handle.state = handle.state, WorkerState.GONE
        self._close_pipe(handle)
        self._unwatch(handle.sentinel)
        os.close(handle.sentinel)
        self._free_gpu(handle.info)
        del self._handles[handle.info.id]
        index, _ = handle.marker.get()
        handle.marker.close()
        if self._closed or previous is WorkerState.STOPPING:
            return
        if previous is WorkerState.STARTING:
            error = f"worker exited with {exit_name(exit_code)} during init(){stderr_tail(handle.logs)}"
            self._events.append(InitFailed(handle.info, error))
            return
        head = index if index in handle.queue else None  # the rest it held goes back unstarted
        if handle.loss is LossReason.TIMED_OUT:
            handle.loss_detail += hang_summary(handle.logs.error)
        detail = handle.loss_detail or (
            f"worker exited with {exit_name(exit_code)}{_oom_hint(handle, exit_code)}{stderr_tail(handle.logs)}"
        )
        self._events.append(Lost(handle.info, head, handle.loss or LossReason.CRASHED, exit_code, detail))

    def _free_gpu(self, info: WorkerInfo) -> None:
        if info.gpu is not None:
            gpus = self._free_gpus[info.node_index]
            gpus.append(info.gpu)
            gpus.sort(key=self.settings.gpu_ids.index)

    # Closing -------------------------------------------------------------------------------

    def close(self, grace: float | None = None) -> None:
        """Idle workers run shutdown(); busy ones are killed. Whatever is still alive after `grace`
        (default `shutdown_timeout`) gets its stacks dumped and is killed: close always returns."""
        if self._closed:
            return
        self._closed = True
        grace = self.settings.shutdown_timeout if grace is None else grace
        for handle in self._handles.values():
            if handle.pipe_open and handle.state is WorkerState.READY and not handle.queue and grace > 0:
                handle.ask_to_stop()
            else:
                handle.kill()
        deadline = time.monotonic() + grace
        for handle in list(self._handles.values()):
            if not _exited(handle, deadline - time.monotonic()):
                self._cut_off(handle, grace)
            self._reap(handle)
        if self._side_input_copies:
            shutil.rmtree(self._side_input_copies, ignore_errors=True)

    def _cut_off(self, handle: WorkerProcess, grace: float) -> None:
        """shutdown() did not return in time: its stacks go to the error log, then it is killed."""
        self.shutdown_cut_off.append(handle.info.id)
        note_hang(handle.logs, shutdown_cut_off_detail(grace))
        if handle.dump_stacks():
            _exited(handle, _DUMP_GRACE_S)
        handle.kill()
        _exited(handle, _REAP_S)


def _exited(handle: WorkerProcess, timeout: float) -> bool:
    try:
        handle.process.wait(timeout=max(0.0, timeout))
        return True
    except subprocess.TimeoutExpired:
        return False


def _oom_hint(handle: WorkerProcess, exit_code: int | None) -> str:
    """A SIGKILL we did not send, from a worker that was using a lot of memory, is likely the OOM killer."""
    if exit_code != -signal.SIGKILL or not handle.last_rss:
        return ""
    share = psutil.virtual_memory().total / max(1, len(psutil.Process().children()))
    if handle.last_rss < min(share / 2, _LIKELY_OOM_RSS):
        return f", not sent by parallel-steps (last RSS {handle.last_rss >> 20} MB)"
    return (
        f": likely out of memory (killed by the kernel's OOM killer?); last RSS {handle.last_rss >> 20} MB "
        f"(see logs/perf/{handle.info.node_id}/)"
    )
