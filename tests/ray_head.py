"""A Ray cluster started the way a user starts one, `<venv>/bin/ray start --head` (the virtualenv not activated),
with its dashboard (the Jobs API) on loopback; shared by the suites that submit runs as Ray jobs (tests/ray, tests/airflow, tests/prefect).

Token authentication: `ray start` turns it on by itself when it finds a token (RAY_AUTH_TOKEN or
~/.ray/auth_token), a client only when RAY_AUTH_MODE says so, so the mode is decided once here
(as `parallel_steps.cluster.access.agree_on_token_auth` decides it) and given to the cluster and to
every client. The cluster's processes detach from the test process, so they are found (and
stopped) by the cluster's own temp dir and address.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

BIN = Path(sys.executable).parent
#: Seconds Ray lets a stopped job's driver finish before it kills it (Ray's default, 3 s, is shorter than the
#: driver's cancel grace): the driver then writes its own `Canceled` summary.
STOP_WAIT_S = "60"


def auth_mode() -> str:
    """`token` when a token is available to every process of this machine, else `disabled`."""
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    return "token" if os.environ.get("RAY_AUTH_TOKEN") or token_file.is_file() else "disabled"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, token: str | None = None) -> Iterator[dict]:
    """`{"address": GCS host:port, "dashboard": http URL, "env": what clients need}` of a running cluster;
    with `token`, a cluster that takes that token only (clients get it from elsewhere: `env` has the mode)."""
    temp_dir = tempfile.mkdtemp(prefix="psjob")  # short: Ray's socket paths must fit in 107 characters
    port, dashboard = free_port(), free_port()
    client_env = {"RAY_AUTH_MODE": "token" if token else auth_mode()}
    env = {
        **os.environ,
        **client_env,
        **({"RAY_AUTH_TOKEN": token} if token else {}),
        "RAY_ADDRESS": "",
        "RAY_JOB_STOP_WAIT_TIME_S": STOP_WAIT_S,
        # Started as `/opt/ray/bin/ray start --head` is, from a shell where the virtualenv is not activated: the
        # cluster's Python is not on PATH (a job's bare `python` would be another one, or none).
        "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != BIN),
    }
    started = subprocess.run(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={100 * 2**20}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--ray-client-server-port={free_port()}",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    cluster = dict(
        address=f"127.0.0.1:{port}", dashboard=f"http://127.0.0.1:{dashboard}", temp_dir=temp_dir, env=client_env
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield cluster
    finally:
        stop(cluster)


@contextlib.contextmanager
def ray_head_as_client(extra_env: dict[str, str] | None = None, token: str | None = None) -> Iterator[dict]:
    """`ray_head()`, with this process (and what it starts) set up as a client of it: the cluster's
    environment (token, auth mode) and `extra_env` set, RAY_ADDRESS unset (runs name the address)."""
    with pytest.MonkeyPatch.context() as patch, ray_head(token=token) as head:
        for name, value in {**head["env"], **(extra_env or {})}.items():
            patch.setenv(name, value)
        patch.delenv("RAY_ADDRESS", raising=False)
        yield head


#: The inputs of a gated step: 6 files, 3 mini-batches of 2.
GATED_NAMES = [f"f{i}.txt" for i in range(6)]


def write_gated_step(folder: Path, row: str = "os.path.basename(p)") -> None:
    """A step's files under `folder`: code/score.py, whose run() marks that it started (a file named after its
    pid in $STARTED), then waits for the file $GATE and returns `row` per input path `p`; data/ with the
    GATED_NAMES files (each holds its name); and started/. A run is then provably running while a test looks."""
    script = f"""
import os, time
from pathlib import Path

def run(mini_batch):
    Path(os.environ["STARTED"], str(os.getpid())).touch()
    while not os.path.exists(os.environ["GATE"]):
        time.sleep(0.05)
    return [{row} for p in mini_batch]
"""
    (folder / "code").mkdir()
    (folder / "code" / "score.py").write_text(script)
    (folder / "data").mkdir()
    for name in GATED_NAMES:
        (folder / "data" / name).write_text(name)
    (folder / "started").mkdir()


def jobs_client(cluster: dict):
    """A Jobs API client of the cluster, for a process whose environment has the cluster's `env`. Its
    token is given explicitly: Ray reads RAY_AUTH_MODE once per process, so after a test that ran a
    local Ray (auth disabled) it would send none."""
    from ray.job_submission import JobSubmissionClient

    from parallel_steps.cluster.access import auth_headers

    return JobSubmissionClient(cluster["dashboard"], headers=auth_headers())


def stop(cluster: dict) -> None:
    """Stop only this cluster (`ray stop` would stop every Ray on the machine), children first."""
    processes = _processes(cluster)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in reversed(processes):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(sig)
        deadline = time.monotonic() + 10
        while _running(processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _running(processes):
            break
    assert not _running(_processes(cluster)), "the test's Ray cluster did not stop"


def worker_actors(cluster: dict) -> list[str]:
    """parallel-steps actors still running in the cluster (Ray titles them `ray::ParallelStepsWorker...`)."""
    left = []
    for process in _running(_processes(cluster)):
        try:
            title = " ".join(process.cmdline()) or process.name()
        except psutil.Error:
            continue
        if "ParallelStepsWorker" in title or "Mailbox" in title:
            left.append(f"{process.pid} {title[:80]}")
    return left


def _processes(cluster: dict) -> list[psutil.Process]:
    """The cluster's processes: those naming its temp dir or GCS port, and their children (Ray renames its
    agents and workers, e.g. `ray::DashboardAgent`, so only their parents name the cluster)."""
    port = cluster["address"].rsplit(":", 1)[1]  # the Ray Client server names the GCS by the node's other IP
    pattern = re.compile(re.escape(cluster["temp_dir"]) + "|" + re.escape(cluster["address"]) + rf"|:{port}\b")
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        if process.pid != os.getpid() and pattern.search(" ".join(process.info["cmdline"] or [])):
            found[process.pid] = process
            with contextlib.suppress(psutil.NoSuchProcess):
                found.update((child.pid, child) for child in process.children(recursive=True))
    return list(found.values())


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Processes not yet exited (the detached ones become zombies until init reaps them)."""
    alive = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
    return alive
