"""One local worker process as the pool sees it: started, written to without blocking, killed.

Only the local pool's loop touches a `WorkerProcess`. The worker side of the socket is
`worker_main.py`, the frames on it `frames.py`; the marker (`marker.py`) says which
mini-batch it runs, and the books (`slots.Slot`) what it holds.
"""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from ...inputs.minibatch import MiniBatch
from ...protocol import RunAttempts, StopWorker, WorkerInfo, WorkerLogPaths, WorkerSpec
from ...worker.downloads import FOLDER_VARIABLE
from ..slots import Slot
from .frames import PoolEnd
from .marker import Marker

#: The temporary folder the driver resolved, for its local workers (worker_main.py): asked for it themselves,
#: they would each write tempfile's probe file in it, which a worker killed at that moment leaves behind.
TMPDIR_VARIABLE = "PARALLEL_STEPS_TMPDIR"
_TEMPORARY = ("TMPDIR", "TEMP", "TMP")  # a step that sets one of these has its workers resolve their own
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the folder holding parallel_steps/


@dataclass
class WorkerProcess:
    """A worker process, its socket and pidfd, and its books."""

    info: WorkerInfo
    process: subprocess.Popen[bytes]
    conn: PoolEnd
    sentinel: int  # a pidfd: readable the moment the process exits
    logs: WorkerLogPaths
    marker: Marker
    pipe_open: bool = True
    slot: Slot = field(default_factory=Slot)
    outbox: list[tuple[MiniBatch, int, float | None]] = field(default_factory=list)  # submitted, not yet sent
    last_rss: int = 0
    downloads: str | None = None  # the worker's folder of copies of files named by URLs, removed when it is gone

    @classmethod
    def start(cls, info: WorkerInfo, spec: WorkerSpec, environment: dict[str, str]) -> WorkerProcess:
        """Start `python -m parallel_steps.pool.local.worker_main` in its own process group (killpg reaches
        what it starts) and queue its spec, the first thing it reads."""
        env = {**os.environ, **environment}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        downloads = None
        if not any(name in environment for name in _TEMPORARY):
            env[TMPDIR_VARIABLE] = tempfile.gettempdir()
            env[FOLDER_VARIABLE] = downloads = tempfile.mkdtemp(prefix=f"parallel-steps-{info.process_name}-")
        parent_end, child_end = socket.socketpair()
        marker = Marker.create()
        command = [
            sys.executable,
            "-m",
            "parallel_steps.pool.local.worker_main",
            str(child_end.fileno()),
            str(os.getpid()),
        ]
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
        conn = PoolEnd(parent_end)
        conn.send(spec)
        return cls(info, process, conn, os.pidfd_open(process.pid), spec.logs, marker, downloads=downloads)

    def observe(self) -> None:
        """Bring the books up to date with the marker: the mini-batch it runs now, and since when."""
        index, since, deadline = self.marker.get()
        if math.isnan(deadline):
            self.slot.start(index, since)
        else:
            self.slot.in_flight(index, since, deadline)

    def send_outbox(self, alone: Container[int]) -> None:
        """Everything submitted since the last look, as one message; those of `alone` to run alone."""
        if self.outbox and self.pipe_open:
            suspects = frozenset(a[0].index for a in self.outbox if a[0].index in alone) if alone else frozenset()
            self.conn.send(RunAttempts(self.outbox, suspects))
            self.outbox = []

    def poll_mask(self) -> int:
        """Write what the socket takes now; the poll mask to watch the socket with (POLLOUT while
        frames wait). A worker stuck in run() with a full socket must not stop the loop that
        enforces its deadline."""
        return select.POLLIN | (select.POLLOUT if self.conn.flush() else 0)

    def ask_to_stop(self) -> None:
        """An idle worker runs shutdown() and exits (its socket is empty: the stop goes at once)."""
        self.conn.send(StopWorker())

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
            self.pipe_open = False
