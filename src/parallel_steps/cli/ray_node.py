"""The Ray processes of one node of a multi-node job: `ray start --block` owned by the node command,
and the probes it uses to watch the head."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from ..cluster.access import NODE_INDEX_LABEL
from ..errors import ParallelStepsError

PROBE_EVERY_S = 1.0
_STOP_GRACE_S = 30.0
_ORPHAN_GRACE_S = 5.0


class RayStart:
    """`ray start --block` owned by this process: stopped on exit, and killed with us (PDEATHSIG)."""

    def __init__(self, options: list[str], node_index: int, extra: str):
        self.command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--block",
            "--disable-usage-stats",
            f"--labels={NODE_INDEX_LABEL}={node_index}",
            *options,
            *shlex.split(extra),
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"parallel-steps-ray-start-{os.getpid()}.log"

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")  # the job is over: nothing to drain
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, preexec_fn=die_with_parent
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM makes `ray start --block` stop the Ray processes it started; SIGKILL after a grace.
        Some Ray agents (the dashboard and runtime-env agents) leave its process group and linger for
        a minute, so every process of the tree seen before the stop that is still alive a few seconds
        after it is killed."""
        if self.process is None:
            return
        tree = _descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _, alive = psutil.wait_procs(tree, timeout=_ORPHAN_GRACE_S)
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=_ORPHAN_GRACE_S)
        self.log.unlink(missing_ok=True)

    def log_hint(self) -> str:
        try:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        return " | ".join(tail) or "no output"


def die_with_parent() -> None:
    """Linux: the child gets SIGTERM if this launcher dies, even by SIGKILL, so no Ray node is orphaned."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PROBE_EVERY_S):
            return True
    except OSError:
        return False


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    keep_going: Callable[[], bool],
    message: str | Callable[[], str],
) -> None:
    """Poll `condition` until it holds; fail with `message` (a string, or a callable made at failure)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline or not keep_going():
            raise ParallelStepsError(message() if callable(message) else message)
        time.sleep(PROBE_EVERY_S / 4)


def own_address(main_address: str | None) -> str:
    """This (main) node's IP: the main address when it names this machine, else the address Ray would pick."""
    if main_address:
        try:
            return socket.gethostbyname(main_address)
        except OSError:
            pass
    import ray

    return str(ray.util.get_node_ip_address())


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
