"""One running Airflow 3 for the suite's server tests, started once (the `airflow_deployment` session fixture):
`airflow db migrate` and `airflow teams sync`, then the api-server (on loopback only), the scheduler
(LocalExecutor) and the dag-processor, in a fresh AIRFLOW_HOME with SQLite.

The dag-processor lists its folders only every few minutes, so every DAG is written before it starts: each
test module registers a function that writes its DAGs (and their data) under the home (`@deployed`).

Multi-team mode is on, with three DAG bundles: `dags` (no team), `team-a` and `team-b`. The users of the
SimpleAuthManager: `trigger` (role user, no team), `author_a` (user, team_a), `reader_a` (viewer, team_a) and
`reader_b` (viewer, team_b): a reader of team_b's DAGs may not read team_a's, which is how another DAG's
reader is told apart. Airflow's processes outlive each test; the fixture stops them at the end of the
session and fails if any process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest

AIRFLOW = Path(sys.executable).with_name("airflow")
STARTUP_TIMEOUT = 240  # seconds; a 2-core CI machine imports Airflow in three processes at once
RUN_TIMEOUT = 240
STOP_GRACE = 30
RESEND_TERM_S = 10  # see Components.stop
COMPONENTS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],  # no log server: the API reads task logs from local files
    "dag-processor": ["dag-processor"],
}
#: DAG bundle -> the team that owns it.
BUNDLES = {"dags": None, "team-a": "team_a", "team-b": "team_b"}
#: User -> role[:team].
USERS = {"trigger": "user", "author_a": "user:team_a", "reader_a": "viewer:team_a", "reader_b": "viewer:team_b"}
_BUNDLE_CLASS = "airflow.dag_processing.bundles.local.LocalDagBundle"
_WRITERS: list[Callable[[Path], None]] = []

T = TypeVar("T")


def deployed(writer: Callable[[Path], None]) -> Callable[[Path], None]:
    """Register `writer(home)`, which writes a module's DAGs into `home / "bundles" / BUNDLE` before Airflow starts."""
    _WRITERS.append(writer)
    return writer


@dataclass
class Components:
    """The Airflow processes, each writing its console to <home>/<name>.log."""

    home: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self) -> None:
        for name, args in COMPONENTS.items():
            with open(self.home / f"{name}.log", "wb") as log:
                self.processes[name] = subprocess.Popen(
                    [str(AIRFLOW), *args], env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )

    def check(self) -> None:
        """Fail the test, with the logs, if a component has exited."""
        exited = [f"{name} (exit {p.returncode})" for name, p in self.processes.items() if p.poll() is not None]
        if exited:
            pytest.fail(f"airflow {', '.join(exited)} exited\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {name} (last lines) ---\n{_tail(self.home / f'{name}.log')}" for name in COMPONENTS)

    def stop(self) -> list[str]:
        """Stop the components as a service manager would (SIGTERM, then wait); what is still alive
        STOP_GRACE seconds later is killed, and its command line returned.

        A component still running after RESEND_TERM_S gets a second SIGTERM: Airflow's dag-processor
        loses one that lands while it forks a parser (its handler's `sys.exit` then runs inside the
        fork's logging hook, where Python ignores the exception), and keeps parsing."""
        tree = [p for proc in self.processes.values() for p in _with_descendants(proc.pid)]
        for proc in self.processes.values():
            proc.terminate()
        psutil.wait_procs(tree, timeout=RESEND_TERM_S)
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        _, alive = psutil.wait_procs(tree, timeout=STOP_GRACE - RESEND_TERM_S)
        left = [" ".join(_cmdline(p)) for p in alive]
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(alive, timeout=10)
        for proc in self.processes.values():
            proc.wait(timeout=10)
        return left


def wait_for(what: str, probe: Callable[[], T | None], components: Components, timeout: float = RUN_TIMEOUT) -> T:
    """Poll `probe` until it returns something other than None; fail naming `what` after `timeout` s,
    or at once if an Airflow component exited."""
    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        components.check()
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s\n{components.logs()}")
        time.sleep(0.5)
    return found


@dataclass
class Deployment:
    """The running Airflow: its home, its API's URL, the run root of its tasks, and its users' clients."""

    home: Path
    url: str
    runs: Path  # PARALLEL_STEPS_HOME of the tasks and of the api-server
    components: Components
    passwords: dict[str, str]
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def token(self, user: str) -> str:
        """A JWT of `user` from the SimpleAuthManager's token endpoint."""
        response = httpx.post(f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]})
        assert response.status_code == 201, response.text
        return response.json()["access_token"]

    def client(self, user: str) -> httpx.Client:
        """The REST API as `user` sees it (logged in)."""
        if user not in self.clients:
            headers = {"Authorization": f"Bearer {self.token(user)}"}
            self.clients[user] = httpx.Client(base_url=self.url, timeout=30, headers=headers)
        return self.clients[user]

    def trigger(self, user: str, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """POST a manual DAG run as `user`; its run id."""
        response = self.client(user).post(
            f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}}
        )
        assert response.status_code == 200, response.text
        return response.json()["dag_run_id"]

    def finished(self, user: str, dag_id: str, run_id: str) -> str:
        """Wait for the DAG run to end; its state (success or failed)."""

        def state() -> str | None:
            response = self.client(user).get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            assert response.status_code == 200, response.text
            found = response.json()["state"]
            return found if found in ("success", "failed") else None

        return wait_for(f"DAG run {dag_id}/{run_id} to finish", state, self.components)

    def xcom(self, user: str, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> httpx.Response:
        return self.client(user).get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        )


@contextlib.contextmanager
def running_airflow(home: Path) -> Iterator[Deployment]:
    """Start Airflow in `home` with every registered DAG; stop it after, failing if a process is left."""
    for bundle in BUNDLES:
        (home / "bundles" / bundle).mkdir(parents=True)
    for write in _WRITERS:
        write(home)
    passwords = {user: secrets.token_urlsafe(16) for user in USERS}
    (home / "passwords.json").write_text(json.dumps(passwords))
    components = Components(home, _environment(home, _free_port()))
    for command in (("db", "migrate"), ("teams", "sync")):
        done = subprocess.run(
            [str(AIRFLOW), *command], env=components.env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT
        )
        assert done.returncode == 0, f"airflow {' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    url = components.env["AIRFLOW__API__BASE_URL"]
    deployment = Deployment(home, url, Path(components.env["PARALLEL_STEPS_HOME"]), components, passwords)
    try:
        components.start()
        wait_for("the API", lambda: _answering(url), components, STARTUP_TIMEOUT)
        wait_for("the scheduler", lambda: _healthy(deployment.client("trigger")), components, STARTUP_TIMEOUT)
        yield deployment
    finally:
        for client in deployment.clients.values():
            client.close()
        left = components.stop()
        assert not left, f"processes left after Airflow stopped (killed now): {left}\n{components.logs()}"


def wait_for_dags(deployment: Deployment, user: str, *dag_ids: str) -> None:
    """Wait until the dag-processor has parsed the DAGs (unpaused, as DAGs are at creation here)."""

    def parsed() -> bool | None:
        for dag_id in dag_ids:
            response = deployment.client(user).get(f"/api/v2/dags/{dag_id}")
            if response.status_code != 200:
                return None
            assert response.json()["is_paused"] is False, response.text
        return True

    wait_for(f"the DAGs {', '.join(dag_ids)}", parsed, deployment.components, STARTUP_TIMEOUT)


def _environment(home: Path, port: int) -> dict[str, str]:
    """A fresh Airflow home: SQLite, LocalExecutor, the API on 127.0.0.1:port, the bundles and users above."""
    url = f"http://127.0.0.1:{port}"
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    bundles = [
        {"name": name, "classpath": _BUNDLE_CLASS, "kwargs": {"path": str(home / "bundles" / name)}}
        | ({"team_name": team} if team else {})
        for name, team in BUNDLES.items()
    ]
    return {
        **inherited,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "bundles" / "dags"),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "1",  # the LocalExecutor starts this many workers at most
        # A task's supervisor wakes this often to see whether the task's process has exited (default 5 s):
        # the executor's slot stays taken until then, so back-to-back tasks waited up to 5 s each.
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": url,  # the tasks reach the execution API there too
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),  # shared by the scheduler and the API
        "PARALLEL_STEPS_HOME": str(home / "runs"),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answering(url: str) -> bool | None:
    try:
        httpx.get(f"{url}/api/v2/monitor/health", timeout=5)
    except httpx.TransportError:
        return None
    return True


def _healthy(client: httpx.Client) -> bool | None:
    health = client.get("/api/v2/monitor/health").json()
    return True if health["scheduler"]["status"] == "healthy" else None


def _with_descendants(pid: int) -> list[psutil.Process]:
    try:
        process = psutil.Process(pid)
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.NoSuchProcess:
        return ["(exited)"]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return str(exc)
