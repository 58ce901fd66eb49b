"""Trigger-time input through the REST API of a running Airflow 3: a conf may change the fields open to
trigger-time input (mini_batch_size, error_threshold) and fails the task, naming the field, when it
tries the code that runs (entry_script).

The module starts a real Airflow - `airflow db migrate`, then the api-server (on loopback only), the
scheduler (LocalExecutor) and the dag-processor - in a fresh AIRFLOW_HOME with SQLite and a DAG
written here. Whoever triggers logs in as a SimpleAuthManager user with the "user" role: allowed to
trigger DAGs and read their logs and XComs, not to write DAG files - the privilege the trust
boundary is about.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest

pytestmark = pytest.mark.slow

DAG_ID = "parallel_run_rest"
TASK_ID = "score"
FILES = 3
USER = "trigger"
AIRFLOW = Path(sys.executable).with_name("airflow")
STARTUP_TIMEOUT = 240  # seconds; a 2-core CI machine imports Airflow in three processes at once
RUN_TIMEOUT = 240
STOP_GRACE = 30
COMPONENTS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],  # no log server: the API reads task logs from local files
    "dag-processor": ["dag-processor"],
}

SCORE = """
def run(mini_batch):
    return [open(path).read().strip() for path in mini_batch]
"""

# The entry script a trigger conf tries to substitute: importing it would leave a mark.
OTHER = """
from pathlib import Path
Path({mark!r}).write_text("the substituted entry script ran")
def run(mini_batch):
    return []
"""

DAG = """
from airflow.sdk import DAG
from parallel_steps.airflow import ParallelRunOperator

with DAG(dag_id={dag_id!r}, schedule=None, catchup=False):
    ParallelRunOperator(
        task_id={task_id!r}, entry_script={script!r}, inputs={inputs!r}, mini_batch_size={files},
        process_count_per_node=1,
    )
"""

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], airflow: Components, timeout: float) -> T:
    """Poll `probe` until it returns something other than None; fail naming `what` after `timeout` s,
    or at once if an Airflow component exited."""
    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        airflow.check()
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s\n{airflow.logs()}")
        time.sleep(0.5)
    return found


@dataclass
class Components:
    """The Airflow processes this module runs, each writing its console to <home>/<name>.log."""

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
        STOP_GRACE seconds later is killed, and its command line returned."""
        tree = [p for proc in self.processes.values() for p in _with_descendants(proc.pid)]
        for proc in self.processes.values():
            proc.terminate()
        _, alive = psutil.wait_procs(tree, timeout=STOP_GRACE)
        left = [" ".join(_cmdline(p)) for p in alive]
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(alive, timeout=10)
        for proc in self.processes.values():
            proc.wait(timeout=10)
        return left


@dataclass
class RunningAirflow:
    """A running Airflow's REST API, as the triggering user sees it, plus what the test wrote for it."""

    client: httpx.Client
    home: Path
    runs: Path  # PARALLEL_STEPS_HOME of the tasks
    mark: Path  # written if the substituted entry script is ever imported
    components: Components

    def trigger(self, conf: dict[str, Any]) -> str:
        """POST a manual DAG run with `conf`; its run id."""
        response = self.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        assert response.status_code == 200, response.text
        return response.json()["dag_run_id"]

    def finished(self, run_id: str) -> str:
        """Wait for the run to end; its state (success or failed)."""

        def state() -> str | None:
            response = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")
            assert response.status_code == 200, response.text
            found = response.json()["state"]
            return found if found in ("success", "failed") else None

        return wait_for(f"DAG run {run_id} to finish", state, self.components, RUN_TIMEOUT)

    def task_instance(self, run_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}")
        assert response.status_code == 200, response.text
        return response.json()

    def xcom(self, run_id: str, key: str = "return_value") -> httpx.Response:
        return self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/xcomEntries/{key}")

    def log(self, run_id: str, try_number: int) -> list[dict[str, Any]]:
        """The task's log through the task-instance log endpoint, as structured events."""
        response = self.client.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/logs/{try_number}",
            params={"full_content": True},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 200, response.text
        return response.json()["content"]


@pytest.fixture(scope="module")
def airflow_api(tmp_path_factory) -> Iterator[RunningAirflow]:
    """A running Airflow with the DAG parsed and the scheduler up, logged in as the triggering user."""
    home = tmp_path_factory.mktemp("airflow-rest")
    mark = home / "other-ran"
    password = secrets.token_urlsafe(16)
    (home / "passwords.json").write_text(json.dumps({USER: password}))
    _write_dag(home)
    airflow = Components(home, _environment(home, _free_port()))
    migrate = subprocess.run(
        [str(AIRFLOW), "db", "migrate"], env=airflow.env, capture_output=True, text=True, timeout=STARTUP_TIMEOUT
    )
    assert migrate.returncode == 0, f"airflow db migrate failed:\n{migrate.stdout}\n{migrate.stderr}"
    url = airflow.env["AIRFLOW__API__BASE_URL"]
    try:
        airflow.start()
        with httpx.Client(base_url=url, timeout=30) as anonymous:
            token = wait_for("a token from the API", lambda: _token(anonymous, password), airflow, STARTUP_TIMEOUT)
        with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
            wait_for("the scheduler and the DAG", lambda: _ready(client), airflow, STARTUP_TIMEOUT)
            yield RunningAirflow(client, home, Path(airflow.env["PARALLEL_STEPS_HOME"]), mark, airflow)
    finally:
        left = airflow.stop()
        assert not left, f"processes left after Airflow stopped (killed now): {left}\n{airflow.logs()}"


@pytest.fixture
def excused_process(airflow_api):
    """Airflow's own processes (its components and the LocalExecutor's workers) outlive each test;
    the module fixture stops them and checks that nothing is left."""
    return lambda process, before: process.name().startswith("airflow")


def test_a_trigger_conf_through_the_rest_api_overrides_the_open_fields(airflow_api):
    run_id = airflow_api.trigger({"mini_batch_size": 1, "error_threshold": 0})
    state = airflow_api.finished(run_id)
    log = "\n".join(json.dumps(event) for event in airflow_api.log(run_id, 1))
    assert state == "success", log
    assert "trigger conf override: mini_batch_size=1, error_threshold=0" in log

    response = airflow_api.xcom(run_id)
    assert response.status_code == 200, response.text
    summary = response.json()["value"]
    assert summary["status"] == "Succeeded"
    assert (summary["config"]["mini_batch_size"], summary["config"]["error_threshold"]) == (1, 0)
    assert (summary["mini_batches_total"], summary["items_succeeded"]) == (FILES, FILES)  # the DAG's own size makes one
    assert Path(summary["output_file"]).read_text().split() == [str(i) for i in range(FILES)]
    assert Path(summary["run_dir"]).is_relative_to(airflow_api.runs)


def test_a_trigger_conf_through_the_rest_api_may_not_change_the_entry_script(airflow_api):
    other = airflow_api.home / "other.py"
    other.write_text(OTHER.format(mark=str(airflow_api.mark)))
    before = set(airflow_api.runs.rglob("*"))
    run_id = airflow_api.trigger({"entry_script": str(other)})
    assert airflow_api.finished(run_id) == "failed"

    task = airflow_api.task_instance(run_id)
    assert (task["state"], task["try_number"]) == ("failed", 1)  # a configuration error is not retried
    events = airflow_api.log(run_id, task["try_number"])
    errors = [error for event in events for error in event.get("error_detail") or []]
    assert [e["exc_type"] for e in errors] == ["AirflowFailException"], json.dumps(events, indent=1)
    message = errors[0]["exc_value"]
    assert len(message.splitlines()) == 1
    assert "entry_script: may not be set by trigger-time input" in message
    assert "params_override=[..., 'entry_script']" in message

    assert airflow_api.xcom(run_id).status_code == 404  # no summary
    assert set(airflow_api.runs.rglob("*")) == before  # the step never started: no run directory
    assert not airflow_api.mark.exists()  # and the other script was never imported


# The running Airflow -------------------------------------------------------------------------------


def _environment(home: Path, port: int) -> dict[str, str]:
    """A fresh Airflow home: SQLite, LocalExecutor, the API on 127.0.0.1:port, one non-admin user."""
    url = f"http://127.0.0.1:{port}"
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    return {
        **inherited,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "1",  # the LocalExecutor starts this many workers at most
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:user",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": url,  # the tasks reach the execution API there too
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),  # shared by the scheduler and the API
        "PARALLEL_STEPS_HOME": str(home / "runs"),
    }


def _write_dag(home: Path) -> None:
    data = home / "data"
    data.mkdir()
    for i in range(FILES):
        (data / f"f{i}.txt").write_text(f"{i}\n")
    script = home / "score.py"
    script.write_text(SCORE)
    (home / "dags").mkdir()
    dag = DAG.format(dag_id=DAG_ID, task_id=TASK_ID, script=str(script), inputs=str(data), files=FILES)
    (home / "dags" / f"{DAG_ID}.py").write_text(textwrap.dedent(dag))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _token(client: httpx.Client, password: str) -> str | None:
    """A JWT from the SimpleAuthManager's token endpoint; None while the API is not up."""
    try:
        response = client.post("/auth/token", json={"username": USER, "password": password})
    except httpx.TransportError:
        return None
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


def _ready(client: httpx.Client) -> bool | None:
    """True once the scheduler heartbeats and the DAG is parsed and unpaused."""
    health = client.get("/api/v2/monitor/health").json()
    dag = client.get(f"/api/v2/dags/{DAG_ID}")
    if health["scheduler"]["status"] != "healthy" or dag.status_code != 200:
        return None
    assert dag.json()["is_paused"] is False, dag.text
    return True


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
