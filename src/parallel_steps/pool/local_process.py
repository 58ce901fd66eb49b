"""One local worker process as the pool sees it: started, written to without blocking, killed.

Only the local pool's loop touches a `WorkerProcess`. The worker side of the pipe is
`local_worker.py`; the marker (`marker.py`) says which mini-batch it runs.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

from ..inputs.minibatch import MiniBatch
from ..protocol import LossReason, WorkerInfo, WorkerSpec
from ..store.logs import WorkerLogPaths
from .base import WorkerState
from .marker import Marker

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class WorkerProcess:
    """A worker process, its pipe and pidfd, and the mini-batches it holds."""

    info: WorkerInfo
    process: subprocess.Popen[bytes]
    conn: Connection
    sentinel: int  # a pidfd: readable the moment the process exits
    logs: WorkerLogPaths
    marker: Marker
    sender: socket.socket  # the pipe's socket, written without blocking
    pipe_open: bool = True
    state: WorkerState = WorkerState.STARTING
    queue: dict[int, float | None] = field(default_factory=dict)  # mini-batch index -> timeout, in order
    outbox: list[tuple[MiniBatch, int]] = field(default_factory=list)  # submitted, not yet framed
    unsent: bytearray = field(default_factory=bytearray)  # framed messages the socket did not take yet
    extended: tuple[int, float | None] | None = None  # (index, deadline) set by EntryScript.hang_timeout
    kill_at: float | None = None
    loss: LossReason | None = None  # set when the pool decided to kill it
    loss_detail: str = ""
    last_rss: int = 0

    @classmethod
    def start(cls, info: WorkerInfo, spec: WorkerSpec, environment: dict[str, str]) -> WorkerProcess:
        """Start `python -m parallel_steps.pool.local_worker` in its own process group (killpg reaches
        what it starts) and send it its spec."""
        env = {**os.environ, **environment}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        parent_end, child_end = Pipe(duplex=True)
        marker = Marker.create()
        command = [sys.executable, "-m", "parallel_steps.pool.local_worker", str(child_end.fileno()), str(os.getpid())]
        with open(spec.logs.stdout, "ab") as stdout, open(spec.logs.stderr, "ab") as stderr:
            process = subprocess.Popen(
                [*command, str(marker.fd)],
                pass_fds=[child_end.fileno(), marker.fd],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,
            )
        child_end.close()
        parent_end.send(spec)  # the worker reads it first thing
        sender = socket.socket(fileno=os.dup(parent_end.fileno()))
        return cls(info, process, parent_end, os.pidfd_open(process.pid), spec.logs, marker, sender)

    def running(self) -> tuple[int, float | None] | None:
        """The mini-batch it runs now and its deadline (None: no limit), from its marker."""
        index, since = self.marker.get()
        if index not in self.queue:
            return None
        if self.extended and self.extended[0] == index:
            return index, self.extended[1]
        timeout = self.queue[index]
        return index, since + timeout if timeout else None

    def frame_outbox(self) -> None:
        """Everything submitted since the last look, as one framed message (Connection's framing)."""
        if self.outbox and self.pipe_open:
            data = ForkingPickler.dumps(("run", self.outbox))
            self.unsent += struct.pack("!i", len(data)) + data
            self.outbox = []

    def write(self) -> int:
        """Send what the socket takes now, never blocking; returns the poll mask to watch the pipe with.
        A worker stuck in run() with a full socket must not stop the loop that enforces its deadline."""
        try:
            sent = self.sender.send(self.unsent, socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        except OSError:  # it died just now; its sentinel reports the loss
            sent = len(self.unsent)
        del self.unsent[:sent]
        return select.POLLIN | (select.POLLOUT if self.unsent else 0)

    def ask_to_stop(self) -> None:
        """An idle worker runs shutdown() and exits."""
        try:
            self.conn.send(("stop",))
        except OSError:
            pass

    def dump_stacks(self) -> bool:
        """faulthandler in the worker writes every thread's stack to its error log; False if it is gone."""
        try:
            os.kill(self.process.pid, signal.SIGUSR1)
            return True
        except ProcessLookupError:
            return False

    def kill(self) -> None:
        """SIGKILL the worker and everything it started."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close_pipe(self) -> None:
        if self.pipe_open:
            self.conn.close()
            self.sender.close()
            self.pipe_open = False
