"""The local worker pool: worker processes on this machine, supervised from one loop.

    driver ──submit──▶ LocalWorkerPool ──(duplex pipe per worker)──▶ worker process
       ▲                   │  polls: every pipe, every pidfd sentinel,
       └── next_events ◀───┘  a wakeup pipe; timeout = the nearest deadline

One owner, one loop, no locks: only the pool holds the worker handles. A worker
runs the mini-batches it was given in order, one at a time; a short queue lets
it start the next one without waiting for the driver, and results of quick
ones come back a few at a time. Its marker (a small shared file) says which
mini-batch it runs and since when, so a deadline counts from the real start,
and a sentinel (pidfd) firing the moment it dies maps to exactly that
mini-batch; the others it held go back unstarted. `node_count > 1` simulates
nodes on one machine.
"""

from __future__ import annotations

import collections
import math
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import psutil

from ..inputs.minibatch import MiniBatch
from ..inputs.storage import is_url
from ..store.logs import WorkerLogPaths, hang_summary, stderr_tail
from ..worker.runtime import side_inputs_root
from .base import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    Lost,
    PoolSettings,
    Ready,
    WorkerInfo,
    WorkerPool,
    node_id_of,
    tree_rss,
)
from .local_worker import Marker

_DUMP_GRACE_S = 1.0  # time a hung worker gets to write its stacks before SIGKILL
_MEMORY_CHECK_S = 1.0
_LIKELY_OOM_RSS = 1 << 30
_MARKER_CHECK_S = 0.05  # how soon to look again for the start of a queued mini-batch
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class _Handle:
    """One worker process and what it holds (only the pool's loop touches it)."""

    info: WorkerInfo
    process: subprocess.Popen
    conn: Connection | None
    sentinel: int
    logs: WorkerLogPaths
    marker: Marker | None = None
    state: str = "starting"  # starting | ready | stopping | gone
    queue: dict[int, tuple[MiniBatch, int, float | None]] = field(default_factory=dict)  # by index, in order
    outbox: list = field(default_factory=list)
    unsent: bytearray = field(default_factory=bytearray)  # framed messages the socket did not take yet
    sender: socket.socket | None = None  # the same socket, written without blocking
    extended: tuple[int, float] | None = None  # (mini-batch index, deadline) set by EntryScript.hang_timeout
    kill_at: float | None = None
    kill_reason: str | None = None
    kill_detail: str = ""
    last_rss: int = 0

    def running(self) -> tuple[MiniBatch, float | None] | None:
        """The mini-batch it runs now and its deadline (None: no limit), from its marker."""
        index, since = self.marker.get()
        entry = self.queue.get(index)
        if entry is None:
            return None
        mini_batch, _, timeout = entry
        if self.extended and self.extended[0] == index:
            return mini_batch, self.extended[1]
        return mini_batch, since + timeout if timeout else None

    def take(self, index: int) -> tuple[MiniBatch, int] | None:
        """Remove the queue entry of mini-batch `index`."""
        entry = self.queue.pop(index, None)
        return entry[:2] if entry else None


class LocalWorkerPool(WorkerPool):
    """`node_count x process_count_per_node` worker processes on this machine."""

    def __init__(self, settings: PoolSettings):
        super().__init__(settings)
        self._handles: dict[str, _Handle] = {}
        self._events: collections.deque[Event] = collections.deque()
        self._next_process: dict[int, int] = collections.defaultdict(int)
        self._free_gpus = {n: list(settings.gpu_ids) for n in range(settings.node_count)}
        self._wakeup_r, self._wakeup_w = os.pipe()
        self._poller = select.poll()  # registered once per descriptor, not rebuilt per wait
        self._by_fd: dict[int, tuple[str, _Handle | None]] = {}
        self._watch(self._wakeup_r, "wakeup", None)
        self._next_memory_check = 0.0
        self._side_input_copies: Path | None = None  # where workers copy side inputs named by URLs
        self._closed = False

    # Starting workers -----------------------------------------------------------------

    def start(self) -> None:
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _spawn(self, node: int, slot: int) -> None:
        node_id = node_id_of(node)
        process_name = f"process{self._next_process[node]:03d}"
        self._next_process[node] += 1
        gpus = self._free_gpus[node]
        gpu = gpus.pop(0) if gpus else None
        spec = self.settings.make_spec(node, node_id, process_name)
        if any(is_url(path) for path in spec.side_inputs.values()):
            self._side_input_copies = side_inputs_root(spec)
        env = {**os.environ, **self.settings.worker_environment(node, process_name, gpu)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        parent_end, child_end = Pipe(duplex=True)
        marker = Marker.create()
        with open(spec.logs.stdout, "ab") as stdout, open(spec.logs.stderr, "ab") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "parallel_steps.pool.local_worker",
                    str(child_end.fileno()),
                    str(os.getpid()),
                    marker.path,
                ],
                pass_fds=[child_end.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,
            )  # its own process group: killpg reaches its children
        child_end.close()
        parent_end.send(spec)
        info = WorkerInfo(
            id=f"{node_id}/{process_name}",
            node_index=node,
            node_id=node_id,
            process_name=process_name,
            slot=slot,
            pid=process.pid,
            gpu=gpu,
        )
        handle = self._handles[info.id] = _Handle(
            info,
            process,
            parent_end,
            os.pidfd_open(process.pid),
            spec.logs,
            marker,
            sender=socket.socket(fileno=os.dup(parent_end.fileno())),
        )
        self._watch(parent_end.fileno(), "conn", handle)
        self._watch(handle.sentinel, "sentinel", handle)

    def _watch(self, fd: int, kind: str, handle: _Handle | None) -> None:
        self._poller.register(fd, select.POLLIN)
        self._by_fd[fd] = (kind, handle)

    def _unwatch(self, fd: int) -> None:
        if self._by_fd.pop(fd, None):
            self._poller.unregister(fd)

    def replace(self, worker: WorkerInfo) -> None:
        self._check_open()
        self._spawn(worker.node_index, worker.slot)

    def processes(self) -> dict[str, list[tuple[str, int]]]:
        found: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        for handle in list(self._handles.values()):
            found[handle.info.node_id].append((handle.info.process_name, handle.process.pid))
        return found

    # Feeding and waiting ----------------------------------------------------------------

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        self._check_open()
        handle = self._handles.get(worker.id)
        if handle is None:
            return  # it died after the driver last looked; its Lost event sends this one elsewhere
        if handle.state != "ready":
            raise RuntimeError(f"worker {worker.id} is {handle.state}, not ready")
        handle.queue[mini_batch.index] = (mini_batch, attempt, timeout)
        handle.outbox.append((mini_batch, attempt))

    def wakeup(self) -> None:
        """Make a waiting `next_events` return (safe from signal handlers and other threads)."""
        os.write(self._wakeup_w, b"x")

    def next_events(self, timeout: float) -> list[Event]:
        self._flush()  # what was submitted since the last look goes out, one message per worker
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

    def _flush(self) -> None:
        """Send what was submitted since the last wait, one message per worker. Never blocks: what
        the socket does not take now goes when it can, so a worker stuck in run() with a full
        socket cannot stop the loop that enforces its deadline."""
        for handle in self._handles.values():
            if handle.outbox and handle.conn is not None:
                data = ForkingPickler.dumps(("run", handle.outbox))
                handle.unsent += struct.pack("!i", len(data)) + data  # Connection's framing
                handle.outbox = []
                self._write(handle)

    def _write(self, handle: _Handle) -> None:
        try:
            sent = handle.sender.send(handle.unsent, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError:  # it died just now; its sentinel reports the loss
            sent = len(handle.unsent)
        del handle.unsent[:sent]
        self._poller.modify(handle.conn.fileno(), select.POLLIN | (select.POLLOUT if handle.unsent else 0))

    def _next_wakeup(self, now: float) -> float:
        times = [now + 3600]
        for handle in self._handles.values():
            if handle.kill_at is not None:
                times.append(handle.kill_at)
            if handle.queue:
                running = handle.running()
                # a queued mini-batch may start any moment: look again soon to learn its deadline
                times.append(running[1] or now + 3600 if running else now + _MARKER_CHECK_S)
                times.append(self._next_memory_check)
        return min(times)

    def _handle_ready(self, fd: int, mask: int) -> None:
        kind, handle = self._by_fd.get(fd, (None, None))
        if kind == "wakeup":
            os.read(self._wakeup_r, 4096)
        elif kind == "conn":
            if mask & select.POLLOUT:
                self._write(handle)
            if mask & ~select.POLLOUT and handle.conn is not None:
                self._receive(handle)
        elif kind == "sentinel":
            self._reap(handle)

    def _receive(self, handle: _Handle) -> None:
        """Read one message; the poller reports the pipe again while more are waiting."""
        try:
            self._on_message(handle, handle.conn.recv())
        except (EOFError, OSError):
            self._close_conn(handle)  # the sentinel tells the rest

    def _close_conn(self, handle: _Handle) -> None:
        if handle.conn is not None:
            self._unwatch(handle.conn.fileno())
            handle.conn.close()
            handle.sender.close()
            handle.conn = handle.sender = None

    def _on_message(self, handle: _Handle, message: tuple) -> None:
        kind = message[0]
        if kind == "ready":
            handle.state = "ready"
            self._events.append(Ready(handle.info))
        elif kind == "init_failed":
            handle.state = "stopping"
            self._events.append(InitFailed(handle.info, message[1]))
        elif kind == "loaded":
            self._events.append(ItemsLoaded(handle.info, message[1], message[2]))
        elif kind == "hang_timeout":
            self._set_hang_timeout(handle, message[1])
        elif kind == "results":
            for index, outcome in message[1]:
                entry = handle.take(index)
                if entry:
                    self._events.append(Finished(handle.info, *entry, outcome))

    def _set_hang_timeout(self, handle: _Handle, seconds: float | None) -> None:
        index, _ = handle.marker.get()
        entry = handle.queue.get(index)
        if entry is None:
            return
        if seconds is not None and seconds < 0:
            seconds = entry[2]
        handle.extended = (index, time.monotonic() + seconds if seconds else None)
        self._events.append(HangTimeoutChanged(handle.info, seconds))

    # Losing workers ---------------------------------------------------------------------

    def _enforce_deadlines(self, now: float) -> None:
        for handle in self._handles.values():
            if handle.kill_at is not None and now >= handle.kill_at:
                handle.kill_at = None
                _kill_group(handle.process.pid)
            elif handle.queue and not handle.kill_reason and (running := handle.running()):
                mini_batch, deadline = running
                if deadline is not None and now >= deadline:
                    limit = handle.queue[mini_batch.index][2]
                    self._dump_and_kill(
                        handle, "timed_out", f"run() exceeded {limit:g} s on mini-batch {mini_batch.index}"
                    )
        if now >= self._next_memory_check:
            self._next_memory_check = now + _MEMORY_CHECK_S
            self._sample_memory()

    def _dump_and_kill(self, handle: _Handle, reason: str, detail: str) -> None:
        """Write the worker's Python stacks (faulthandler) to its error log, then kill it after a grace."""
        handle.kill_reason, handle.kill_detail = reason, detail
        try:
            with open(handle.logs.error, "a", encoding="utf-8") as log:
                log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {detail}; stacks of every thread:\n")
            os.kill(handle.process.pid, signal.SIGUSR1)
            handle.kill_at = time.monotonic() + _DUMP_GRACE_S
        except ProcessLookupError:
            pass

    def _sample_memory(self) -> None:
        """Sample busy workers' memory: enforce worker_memory_limit, and remember the last RSS so a
        SIGKILL from the kernel's OOM killer can be recognised."""
        limit = self.settings.memory_limit
        for handle in self._handles.values():
            if not handle.queue or handle.kill_reason:
                continue
            rss = handle.last_rss = tree_rss(handle.process.pid)
            if limit and rss > limit:
                handle.kill_reason = "out_of_memory"
                handle.kill_detail = (
                    f"OutOfMemory: worker used {rss / 2**20:.0f} MB, above worker_memory_limit {limit / 2**20:.0f} MB"
                )
                _kill_group(handle.process.pid)

    def _reap(self, handle: _Handle) -> None:
        """The worker process exited: free its slot and GPU, and say what it held."""
        exit_code = handle.process.wait()
        _kill_group(handle.process.pid)  # anything it started
        while handle.conn is not None and handle.conn.poll():
            self._receive(handle)  # results it sent before it died still count
        previous, handle.state = handle.state, "gone"
        self._close_conn(handle)
        self._unwatch(handle.sentinel)
        os.close(handle.sentinel)
        if handle.info.gpu is not None:
            gpus = self._free_gpus[handle.info.node_index]
            gpus.append(handle.info.gpu)
            gpus.sort(key=self.settings.gpu_ids.index)
        del self._handles[handle.info.id]
        if self._closed or previous == "stopping":
            handle.marker.remove()
            return
        if previous == "starting":
            handle.marker.remove()
            self._events.append(
                InitFailed(
                    handle.info, f"worker exited with {exit_name(exit_code)} during init(){stderr_tail(handle.logs)}"
                )
            )
            return
        index, _ = handle.marker.get()
        head, attempt = handle.take(index) or (None, 0)  # the rest it held goes back unstarted
        handle.marker.remove()
        if handle.kill_reason == "timed_out":
            handle.kill_detail += hang_summary(handle.logs.error)
        detail = handle.kill_detail or (
            f"worker exited with {exit_name(exit_code)}{_oom_hint(handle, exit_code)}{stderr_tail(handle.logs)}"
        )
        self._events.append(Lost(handle.info, head, attempt, handle.kill_reason or "crashed", exit_code, detail))

    # Closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Ask idle workers to stop (shutdown() runs), then kill whatever is left after the grace period."""
        if self._closed:
            return
        self._closed = True
        for handle in self._handles.values():
            if handle.conn is not None and handle.state == "ready" and not handle.queue:
                try:
                    handle.conn.send(("stop",))
                except OSError:
                    pass
            else:
                _kill_group(handle.process.pid)
        deadline = time.monotonic() + self.settings.shutdown_timeout
        for handle in list(self._handles.values()):
            try:
                handle.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._dump_and_kill(
                    handle, "exit_hang", f"shutdown() did not finish within {self.settings.shutdown_timeout:g} s"
                )
                time.sleep(_DUMP_GRACE_S)
            self._reap(handle)
        os.close(self._wakeup_r)
        os.close(self._wakeup_w)
        if self._side_input_copies:
            shutil.rmtree(self._side_input_copies, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _oom_hint(handle: _Handle, exit_code: int | None) -> str:
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


def exit_name(code: int | None) -> str:
    """An exit code as people read it: `exit code 1`, or the signal, e.g. `SIGKILL(-9)`."""
    if code is None:
        return "an unknown exit code"
    if code < 0:
        try:
            return f"{signal.Signals(-code).name}({code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
