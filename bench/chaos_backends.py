"""What differs between the backends `bench/chaos.py` soaks: the step's fields, which processes are a driver's
workers, the faults of each backend and how often they come, and (Ray) the cluster the bench runs.

The soak's loop and checks (chaos.py) know none of this: they ask a backend for `step_fields()`, the
`workers(driver_pid)` to watch and kill, and hand it the faults of its own (`inject`).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import psutil

DRIVER_FAULTS = {"driver SIGKILL", "driver SIGTERM"}  # the loop's own; the rest are the backend's
_NODE_TRIES = 3


class LocalBackend:
    """`backend: local`: the workers are the driver's child processes."""

    name = "local"
    worker_fault = "worker SIGKILL"
    # Mean seconds between faults of each kind (exponential intervals).
    intervals: ClassVar[dict[str, float]] = {"worker SIGKILL": 1.5, "driver SIGKILL": 12.0, "driver SIGTERM": 30.0}
    defaults: ClassVar[dict[str, int]] = dict(files=3000, workers=4)
    _WORKER_MODULE = "parallel_steps.pool.local.worker_main"
    _MIN_AGE_S = 1.0  # a worker killed in init() counts against the init() policy: not this soak's fault

    def start(self, root: Path) -> None:
        """Nothing to start: the driver starts its workers."""

    def step_fields(self) -> dict[str, Any]:
        return {}

    def workers(self, driver_pid: int) -> list[psutil.Process]:
        try:
            children = psutil.Process(driver_pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c for c in children if cmdline_has(c, self._WORKER_MODULE)]

    def killable(self, worker: psutil.Process) -> bool:
        """Past init(): old enough."""
        try:
            return time.time() - worker.create_time() > self._MIN_AGE_S
        except psutil.Error:
            return False

    def inject(self, kind: str, rng: random.Random) -> bool:
        raise ValueError(f"no fault {kind!r} on the local backend")

    def tick(self) -> None:
        """Nothing in progress between faults."""

    def close(self) -> None:
        """Nothing to stop."""


class RayBackend:
    """`backend: ray` on a local Ray cluster of a head and `nodes - 1` worker nodes, which the bench starts
    (`ray.cluster_utils.Cluster`: every node a set of processes on this machine) and shuts down.

    The step runs one node index per Ray node (`node_count` = `nodes`), so a killed raylet's slots wait
    for the node that replaces it. The workers are the processes running our actors (Ray sets their
    titles to `ray::ParallelStepsWorker...`); one driver runs at a time, so every one alive is the
    current driver's. The cluster's processes carry the soak's tag (they inherit the bench's
    environment), its files live under the soak's folder, and it uses token authentication
    with a token of its own and random ports (no dashboard), so it collides with no other Ray here.
    """

    name = "ray"
    worker_fault = "actor SIGKILL"
    intervals: ClassVar[dict[str, float]] = {
        "actor SIGKILL": 3.0,
        "raylet SIGKILL": 45.0,
        "driver SIGKILL": 30.0,
        "driver SIGTERM": 60.0,
    }
    defaults: ClassVar[dict[str, int]] = dict(files=1500, workers=2)
    _ACTORS = ("ray::ParallelStepsWorker", "ray::Mailbox")
    _RUNNING = "ray::ParallelStepsWorker.run"  # the title while run() runs: past init()
    _RESTART_AFTER_S = 5.0  # a killed node's replacement starts this long after the kill

    def __init__(self, nodes: int):
        self.nodes = nodes
        self.cluster: Any = None
        self._replacing: threading.Thread | None = None  # a killed node's replacement, while it starts

    def start(self, root: Path) -> None:
        # Before Ray is imported: it reads its auth mode once. The drivers inherit these too.
        os.environ.update(RAY_TMPDIR=str(root / "ray"), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(shutdown_at_exit=False)  # the bench shuts it down
        # No dashboard, autoscaler or log monitor: fewer processes to start at once, none on a default port.
        head = dict(include_dashboard=False, dashboard_port=_free_port(), no_monitor=True, include_log_monitor=False)
        _start_node(lambda: self.cluster.add_node(**_node_args(), **head), after_failure=_kill_children)
        for _ in range(self.nodes - 1):
            self._add_worker_node()

    def step_fields(self) -> dict[str, Any]:
        return dict(backend="ray", ray_address=self.cluster.address, node_count=self.nodes)

    def workers(self, driver_pid: int) -> list[psutil.Process]:
        return [p for p in psutil.Process().children(recursive=True) if _title(p).startswith(self._ACTORS)]

    def killable(self, worker: psutil.Process) -> bool:
        return _title(worker) == self._RUNNING

    def inject(self, kind: str, rng: random.Random) -> bool:
        """`raylet SIGKILL`: a worker node's raylet (its workers and agents follow); a new node replaces it.
        One node down at a time."""
        if kind != "raylet SIGKILL":
            raise ValueError(f"no fault {kind!r} on the ray backend")
        if self._replacing or not self.cluster.worker_nodes:
            return False
        node = rng.choice(sorted(self.cluster.worker_nodes, key=lambda n: n.unique_id))
        node.all_processes["raylet"][0].process.kill()
        self._replacing = threading.Thread(target=self._replace, args=(node,), name="replace-node")
        self._replacing.start()
        return True

    def _replace(self, node: Any) -> None:
        """In the background (a node takes seconds to start): what is left of the killed node goes, and a
        new node joins a little later."""
        self.cluster.remove_node(node, allow_graceful=False)
        time.sleep(self._RESTART_AFTER_S)
        self._add_worker_node()

    def _add_worker_node(self) -> None:
        _start_node(lambda: self.cluster.add_node(**_node_args()))

    def tick(self) -> None:
        if self._replacing and not self._replacing.is_alive():
            self._replacing = None

    def close(self) -> None:
        if self._replacing:
            self._replacing.join()
        if self.cluster is not None:
            self.cluster.shutdown()


def backend(name: str, nodes: int) -> LocalBackend | RayBackend:
    return RayBackend(nodes) if name == "ray" else LocalBackend()


def cmdline_has(process: psutil.Process, text: str) -> bool:
    try:
        return any(text in part for part in process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def _title(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()).strip()
    except psutil.Error:
        return ""


def _start_node(add: Callable[[], Any], after_failure: Callable[[], None] = lambda: None) -> None:
    """Start a node, again if it fails: its raylet waits only 15 s for the dashboard agent to tell its port,
    too short for the agent to start on 2 busy cores. A failed head leaves processes behind (`after_failure`);
    a failed worker node's agents follow its raylet."""
    for attempt in range(_NODE_TRIES):
        try:
            add()
            return
        except Exception:
            if attempt == _NODE_TRIES - 1:
                raise
            after_failure()


def _kill_children() -> None:
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()


def _node_args() -> dict[str, Any]:
    """One simulated node: 1 CPU (actors take none), a small object store, its agents' ports chosen here (a
    raylet given them does not wait for the agents to tell them, but for one)."""
    ports = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port", "runtime_env_agent_port")
    return dict(num_cpus=1, object_store_memory=80 * 2**20, **{name: _free_port() for name in ports})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
