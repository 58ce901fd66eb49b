"""The local worker pool: worker processes on this machine, supervised from one loop.

    driver ──submit──▶ LocalWorkerPool ──(socket pair per worker)──▶ worker process
       ▲                   │  polls: every socket and every pidfd sentinel;
       └── next_events ◀───┘  timeout = the nearest deadline

One owner, one loop, no locks: only the pool holds the worker processes. A worker
runs the mini-batches it was given in order, one at a time; a short queue lets
it start the next one without waiting for the driver, and results of quick
ones come back a few at a time. Its marker (a little shared memory) says which
mini-batch it runs and since when, so a deadline counts from the real start,
and a sentinel (pidfd) firing the moment it dies maps to exactly that
mini-batch; the others it held go back unstarted. `node_count > 1` simulates
nodes on one machine. What each worker holds and the rules for it are its books
(slots.py); deadlines and the memory limit are the watchdog's (watchdog.py);
one process and its socket are a `WorkerProcess` (process.py), the frames on
the socket frames.py's.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import select
import shutil
import time
from pathlib import Path

from ...inputs.minibatch import MiniBatch
from ...protocol import (
    Event,
    Finished,
    FromWorker,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    LossReason,
    Lost,
    Ready,
    WorkerHangTimeout,
    WorkerInfo,
    WorkerInitFailed,
    WorkerLoaded,
    WorkerReady,
    WorkerResults,
)
from ...store.logs import note_hang, stderr_tail
from ...worker.side_inputs import copies_root, remove_copies
from ..base import PoolSettings, WorkerPool, decided_loss
from ..slots import (
    DUMP_GRACE_S,
    Slot,
    WorkerState,
    died_in_init_detail,
    exit_name,
    shutdown_cut_off_detail,
    unattributed_detail,
)
from .process import WorkerProcess
from .watchdog import Watchdog, oom_hint

_REAP_S = 5.0  # the longest a SIGKILLed worker may take to be gone
_POLL_MAX_S = 3600.0  # poll() takes milliseconds in a C int: a longer wait is several


class LocalWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` worker processes on this machine."""

    def __init__(self, settings: PoolSettings):
        super().__init__(settings)
        self._handles: dict[str, WorkerProcess] = {}
        self._events: collections.deque[Event] = collections.deque()
        # Per node, how many more workers each GPU takes (workers_per_gpu each, at first)
        self._gpu_places = [
            dict.fromkeys(settings.gpu_ids, settings.workers_per_gpu) for _ in range(settings.node_count)
        ]
        self._poller = select.poll()  # registered once per descriptor, not rebuilt per wait
        self._by_fd: dict[int, tuple[str, WorkerProcess]] = {}
        self._watchdog = Watchdog(settings.memory_limit)
        self._side_input_copies: Path | None = None  # where workers copy side inputs and models named by URLs
        # Mini-batches a worker with several in flight held when it was lost: each runs alone once (`_lost`)
        self._suspects: set[int] = set()
        self._closed = False

    # Starting workers -----------------------------------------------------------------

    def start(self) -> None:
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _spawn(self, node: int, slot: int) -> None:
        info = self._new_worker(node, slot)
        gpu = self._take_gpu(node)
        spec = self.settings.make_spec(node, info.node_id, info.process_name)
        self._side_input_copies = copies_root(spec, copy_paths=False)
        environment = self.settings.worker_environment(node, info.process_name, gpu)
        worker = WorkerProcess.start(info, spec, environment)
        worker.info = info = dataclasses.replace(info, pid=worker.process.pid, gpu=gpu)
        self._handles[info.id] = worker
        self._watch(worker.conn.fileno(), "conn", worker, worker.poll_mask())  # the spec may still wait
        self._watch(worker.sentinel, "sentinel", worker, select.POLLIN)

    def _watch(self, fd: int, kind: str, worker: WorkerProcess, mask: int) -> None:
        self._poller.register(fd, mask)
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
        handle.slot.hold(mini_batch.index, attempt, timeout)
        handle.outbox.append((mini_batch, attempt, timeout))

    def next_events(self, timeout: float) -> list[Event]:
        for handle in self._handles.values():  # what was submitted since the last look: one message each
            if handle.outbox and handle.pipe_open:
                handle.send_outbox(self._suspects)
                self._poller.modify(handle.conn.fileno(), handle.poll_mask())
        self._gather(0 if self._events else timeout)
        events = list(self._events)
        self._events.clear()
        return events

    def _gather(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            self._watchdog.enforce(self._handles.values(), now)
            wake = min(end, self._watchdog.next_wakeup(self._handles.values(), now))
            for fd, mask in self._poller.poll(math.ceil(max(0.0, wake - now) * 1000)):
                self._handle_ready(fd, mask)
            if self._events or time.monotonic() >= end:
                return

    def _handle_ready(self, fd: int, mask: int) -> None:
        if fd not in self._by_fd:
            return  # unwatched by an earlier event of this poll
        kind, handle = self._by_fd[fd]
        if kind == "conn":
            if mask & select.POLLOUT:
                self._poller.modify(fd, handle.poll_mask())
            if mask & ~select.POLLOUT and handle.pipe_open:
                self._receive(handle)
        elif kind == "sentinel":
            self._reap(handle)

    def _receive(self, handle: WorkerProcess) -> None:
        """Take every message that has come."""
        try:
            messages = handle.conn.receive()
        except (EOFError, OSError):
            self._close_pipe(handle)  # the sentinel tells the rest
            return
        for message in messages:
            self._on_message(handle, message)

    def _close_pipe(self, handle: WorkerProcess) -> None:
        if handle.pipe_open:
            self._unwatch(handle.conn.fileno())
            handle.close_pipe()

    def _on_message(self, handle: WorkerProcess, message: FromWorker) -> None:
        """What the worker says, as events. Messages about an attempt that ended, and results of a
        worker given up, are dropped (the local pool samples memory itself: no WorkerOverMemory)."""
        slot = handle.slot
        match message:
            case WorkerResults() if slot.taking_results:
                for index, outcome in message.results:
                    if slot.finish(index) is not None:
                        self._suspects.discard(index)
                        self._events.append(Finished(handle.info, index, outcome))
            case WorkerLoaded() if slot.holds(message.mini_batch, message.attempt):
                self._events.append(ItemsLoaded(handle.info, message.mini_batch, message.items))
            case WorkerHangTimeout() if slot.holds(message.mini_batch, message.attempt):
                handle.observe()
                if slot.taking_results and slot.running == message.mini_batch:  # it still runs it
                    limit = slot.set_hang_timeout(message.seconds, time.monotonic())
                    self._events.append(HangTimeoutChanged(handle.info, limit))
            case WorkerReady():
                slot.state = WorkerState.READY
                self._events.append(Ready(handle.info))
            case WorkerInitFailed():
                slot.state = WorkerState.STOPPING
                self._events.append(InitFailed(handle.info, message.error))

    # Losing workers ---------------------------------------------------------------------

    def _reap(self, handle: WorkerProcess) -> None:
        """The worker process exited: free its slot and GPU, and say what it held."""
        exit_code = handle.process.wait()
        handle.kill()  # anything it started
        if handle.pipe_open:
            self._receive(handle)  # results it sent before it died still count
        handle.observe()  # the mini-batch it ran when it died
        slot = handle.slot
        previous, slot.state = slot.state, WorkerState.GONE
        self._close_pipe(handle)
        self._unwatch(handle.sentinel)
        os.close(handle.sentinel)
        self._free_gpu(handle.info)
        del self._handles[handle.info.id]
        handle.marker.close()
        if handle.downloads:  # a killed worker's copies: it could not remove them
            shutil.rmtree(handle.downloads, ignore_errors=True)
        if self._closed or (previous is WorkerState.STOPPING and slot.loss is None):
            return  # closing, or its init() failed (reported then)
        if previous is WorkerState.STARTING:
            error = died_in_init_detail(exit_name(exit_code)) + stderr_tail(handle.logs)
            self._events.append(InitFailed(handle.info, error))
            return
        detail = decided_loss(slot, handle.logs) or (
            f"worker exited with {exit_name(exit_code)}{oom_hint(handle, exit_code)}{stderr_tail(handle.logs)}"
        )
        detail += self._suspect(slot)
        self._events.append(Lost(handle.info, slot.blame(), slot.loss or LossReason.CRASHED, exit_code, detail))

    def _suspect(self, slot: Slot) -> str:
        """A worker lost with several mini-batches in flight (`async def run`) is blamed on none: those it may
        have started (the first `max_concurrency` it held) each run alone once, so that a loss is blamed on the
        one that causes it. Returns what the loss says of them."""
        blamed = slot.blame()
        if blamed is not None:
            self._suspects.discard(blamed)
            return ""
        started = list(slot.held)[: self.settings.max_concurrency] if self.settings.max_concurrency > 1 else []
        self._suspects.update(started)
        return unattributed_detail(len(started)) if started else ""

    def _take_gpu(self, node: int) -> str | None:
        """The node's GPU with the most places left (the first of them), for a new worker; None when all are taken."""
        places = self._gpu_places[node]
        gpu = max(places, key=places.__getitem__, default=None)
        if gpu is None or not places[gpu]:
            return None
        places[gpu] -= 1
        return gpu

    def _free_gpu(self, info: WorkerInfo) -> None:
        if info.gpu is not None:
            self._gpu_places[info.node_index][info.gpu] += 1

    # Closing -------------------------------------------------------------------------------

    def close(self, grace: float | None = None) -> None:
        """Idle workers run shutdown(); busy ones are killed. Whatever is still alive after `grace`
        (default `shutdown_timeout`) gets its stacks dumped and is killed: close always returns."""
        if self._closed:
            return
        self._closed = True
        grace = self.settings.shutdown_timeout if grace is None else grace
        for handle in self._handles.values():
            if handle.pipe_open and handle.slot.state is WorkerState.READY and not handle.slot.held and grace > 0:
                handle.ask_to_stop()
            else:
                handle.kill()
        deadline = time.monotonic() + grace
        for handle in list(self._handles.values()):
            if not _exited(handle, deadline - time.monotonic()):
                self._cut_off(handle, grace)
            self._reap(handle)
        if self._side_input_copies:
            remove_copies(self._side_input_copies)

    def _cut_off(self, handle: WorkerProcess, grace: float) -> None:
        """shutdown() did not return in time: its stacks go to the error log, then it is killed."""
        self.shutdown_cut_off.append(handle.info.id)
        note_hang(handle.logs, shutdown_cut_off_detail(grace))
        if handle.dump_stacks():
            _exited(handle, DUMP_GRACE_S)
        handle.kill()
        _exited(handle, _REAP_S)


def _exited(handle: WorkerProcess, timeout: float) -> bool:
    """Whether the worker exits within `timeout`, known the moment it does from its pidfd (`Popen.wait`
    looks with sleeps of up to 50 ms, which the end of every run would wait for)."""
    poller = select.poll()
    poller.register(handle.sentinel, select.POLLIN)
    deadline = time.monotonic() + max(0.0, timeout)
    while not poller.poll(min(max(0.0, deadline - time.monotonic()), _POLL_MAX_S) * 1000):
        if time.monotonic() >= deadline:
            return False
    handle.process.wait()
    return True
