"""The local worker process: `python -m parallel_steps.pool.local_worker FD`.

A short loop in the spirit of concurrent.futures' `_process_worker`: receive the
spec, init once, then run the mini-batches it is given in order, answering each
as soon as it is done. A watchdog
thread ends the worker (and its children) when the driver is gone, so even a
SIGKILLed driver leaves no orphans.
"""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

from ..worker.runtime import InitError, WorkerRuntime

_PARENT_POLL_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(_PARENT_POLL_S)
        if os.getppid() != parent_pid:
            # Our process group holds the worker and whatever it started.
            os.killpg(os.getpgid(0), signal.SIGKILL)


def main(fd: int, parent_pid: int) -> int:
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="watch-parent").start()
    conn = Connection(fd)
    runtime = WorkerRuntime(conn.recv(), hang_timeout_hook=lambda seconds: conn.send(("hang_timeout", seconds)))
    try:
        runtime.start()
    except InitError as exc:
        conn.send(("init_failed", str(exc)))
        return 3
    conn.send(("ready",))
    queue: collections.deque = collections.deque()
    while True:
        # Block only when there is nothing to run; otherwise take what has arrived meanwhile.
        try:
            while not queue or conn.poll():
                message = conn.recv()
                if message[0] == "stop":
                    runtime.shutdown()
                    return 0
                queue.extend(message[1])
        except EOFError:
            break
        mini_batch, attempt = queue.popleft()
        outcome = runtime.run(mini_batch, attempt, on_loaded=lambda n: conn.send(("loaded", mini_batch.index, n)))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(("result", mini_batch.index, outcome))
    runtime.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
