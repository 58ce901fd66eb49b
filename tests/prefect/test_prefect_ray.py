"""`parallel_run` with `backend="ray"` and `ray_address`: the step's workers are actors on a running cluster.

The cluster is started with `ray start --head` as a user would; its processes detach from this test
process, so they are found (and stopped) by the cluster's own temp dir, and the cluster's worker processes
are checked for leftover parallel-steps actors after the run.
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from prefect_helpers import wait_for

from parallel_steps.prefect import parallel_run
from prefect import flow

RAY = str(Path(sys.executable).parent / "ray")

ON_RAY = """
    import os
    import ray

    def init():
        pass

    def run(mini_batch):
        node = ray.get_runtime_context().get_node_id()
        return [f"{os.path.basename(path)} {node}" for path in mini_batch]
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_processes(cluster: dict) -> list[psutil.Process]:
    """The cluster's processes: those naming its temp dir or address, and their children (Ray renames its
    agents and workers, e.g. `ray::DashboardAgent`, so only their parents name the cluster)."""
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if cluster["temp_dir"] in line or cluster["address"] in line:
            found[process.pid] = process
            with contextlib.suppress(psutil.NoSuchProcess):
                found.update((child.pid, child) for child in process.children(recursive=True))
    return list(found.values())


def _worker_actors(cluster: dict) -> list[str]:
    """parallel-steps worker actors still running in the cluster (Ray titles them `ray::ParallelStepsWorker...`)."""
    left = []
    for process in _running(_cluster_processes(cluster)):
        try:
            title = " ".join(process.cmdline()) or process.name()
        except psutil.Error:
            continue
        if "ParallelStepsWorker" in title or "_Mailbox" in title:
            left.append(f"{process.pid} {title[:80]}")
    return left


@pytest.fixture(scope="module")
def ray_cluster():
    temp_dir = tempfile.mkdtemp(prefix="psray")  # short: Ray's socket paths must fit in 107 characters
    port = _free_port()
    # `ray start` turns on token auth by itself when it finds ~/.ray/auth_token, a driver only when
    # RAY_AUTH_MODE says so: state it, so this cluster and the step's driver agree on every machine.
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    started = subprocess.run(
        [
            RAY,
            "start",
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "2",
            "--num-gpus",
            "0",
            "--object-store-memory",
            str(100 * 2**20),
            "--include-dashboard",
            "false",
            "--temp-dir",
            temp_dir,
            "--disable-usage-stats",
            "--dashboard-agent-listen-port",
            str(_free_port()),
            "--ray-client-server-port",
            str(_free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    address = re.search(r"--address='([^']+)'", started.stdout)  # the head's node IP and port
    cluster = {"address": address.group(1) if address else f":{port}", "temp_dir": temp_dir}
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert address, started.stdout + started.stderr
        yield cluster
    finally:
        _stop(cluster)


def _stop(cluster: dict) -> None:
    """Stop only this cluster (`ray stop` would stop every Ray on the machine), children first."""
    processes = _cluster_processes(cluster)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in reversed(processes):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)
        try:
            wait_for(lambda: not _running(processes), timeout=10, what="the cluster to stop")
        except AssertionError:
            continue
        break
    assert not _running(_cluster_processes(cluster)), "the test's Ray cluster did not stop"


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Processes not yet exited (the detached ones become zombies until init reaps them)."""
    alive = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_a_step_runs_on_a_ray_cluster_given_by_ray_address(ray_cluster, write_script, make_files):
    script, data = write_script(ON_RAY), make_files(6)

    @flow
    def on_ray():
        return parallel_run(
            entry_script=str(script),
            inputs=str(data),
            mini_batch_size=2,
            process_count_per_node=2,
            backend="ray",
            ray_address=ray_cluster["address"],
            name="on-ray",
        )

    summary = on_ray()
    assert (summary["status"], summary["mini_batches_total"]) == ("Succeeded", 3)
    assert summary["config"]["backend"] == "ray"
    assert summary["config"]["ray_address"] == ray_cluster["address"]
    lines = [line.split() for line in Path(summary["output_file"]).read_text().splitlines()]
    assert [name for name, _ in lines] == [f"f{i:04d}.txt" for i in range(6)]
    assert len({node for _, node in lines}) == 1  # a Ray node id: run() ran inside a Ray actor
    wait_for(lambda: not _worker_actors(ray_cluster), timeout=30, what="the worker actors to exit")
