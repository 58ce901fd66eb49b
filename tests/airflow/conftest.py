"""Fixtures of the Airflow suite: a real Airflow 3 home (SQLite, migrated once), `dag.test()` runs of the
example DAGs in this process and `airflow dags test` runs as a command, operator contexts for in-process
tests, and one running Airflow (scheduler, dag-processor, api-server: deployment.py) for the tests that
need the real thing.

Airflow reads its configuration when it is first imported, so the environment is set here,
at import time, before any test module imports Airflow.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
TEST_DAGS = Path(__file__).resolve().parent / "dags"  # DAGs only tests run: a second bundle, `test-dags`
_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
AIRFLOW = Path(sys.executable).with_name("airflow")

_HOME = Path(tempfile.mkdtemp(prefix="parallel-steps-airflow-"))
os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [
                {"name": "dags-folder", "classpath": _BUNDLE, "kwargs": {}},
                {"name": "test-dags", "classpath": _BUNDLE, "kwargs": {"path": str(TEST_DAGS)}},
            ]
        ),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAG_RUN_CONF_OVERRIDES_PARAMS": "True",
        "PARALLEL_STEPS_HOME": str(_HOME / "parallel_steps"),
    }
)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_HOME, ignore_errors=True)


def airflow_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the `airflow` command of this environment, as a user would."""
    return subprocess.run(
        [str(AIRFLOW), *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


@pytest.fixture
def airflow():
    """`airflow(*args)` runs the airflow command line."""
    return airflow_cli


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB with the example DAGs serialized (what `dags test` needs)."""
    for command in (("db", "migrate"), ("dags", "reserialize")):
        result = airflow_cli(*command)
        assert result.returncode == 0, f"airflow {' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    return _HOME / "airflow.db"


@pytest.fixture(scope="session")
def airflow_deployment(tmp_path_factory):
    """The suite's one running Airflow (deployment.py), started when a test first needs it."""
    from deployment import running_airflow

    with running_airflow(tmp_path_factory.mktemp("airflow-deployment")) as deployment:
        yield deployment


@dataclass
class DagRun:
    """One `airflow dags test` run: exit status, console output (the task logs) and XComs."""

    returncode: int
    log: str
    run_id: str
    xcoms: dict[tuple[str, int, str], Any] = field(default_factory=dict)

    def xcom(self, task_id: str, map_index: int = -1, key: str = "return_value") -> Any:
        return self.xcoms[(task_id, map_index, key)]

    def mapped(self, task_id: str) -> list[Any]:
        found = sorted((i, v) for (t, i, k), v in self.xcoms.items() if t == task_id and k == "return_value")
        return [value for _, value in found]


@pytest.fixture
def run_dag(airflow_db, tmp_path):
    """`run_dag(dag_id, conf, logical_date)` runs `airflow dags test DAG [DATE] -c CONF` with this test's run root."""

    def run(dag_id: str, conf: dict[str, Any] | None = None, logical_date: str | None = None) -> DagRun:
        args = ["dags", "test", dag_id, *([logical_date] if logical_date else [])]
        args += ["-c", json.dumps(conf)] if conf else []
        result = airflow_cli(*args, env={"PARALLEL_STEPS_HOME": str(tmp_path / "runs")}, timeout=600)
        log = result.stdout + result.stderr
        run_id = latest_run_id(airflow_db, dag_id)
        assert run_id, f"no dag run of {dag_id}:\n{log[-5000:]}"
        return DagRun(result.returncode, log, run_id, _xcoms(airflow_db, dag_id, run_id))

    return run


@pytest.fixture
def dag_test(airflow_db, capfd):
    """`dag_test(dag_id, conf, logical_date, file)` runs `dag.test()` of dags/<dag_id>.py (or of `file`) in this
    process: what `airflow dags test` runs, without importing Airflow again for every run (the command's own path
    is covered by `run_dag`'s users: storage, lineage, Ray jobs). The run root is this test's (tests/conftest.py)."""
    import pendulum
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils.state import DagRunState

    def run(
        dag_id: str, conf: dict[str, Any] | None = None, logical_date: str | None = None, file: Path | None = None
    ) -> DagRun:
        bag = DagBag(str(file or DAGS / f"{dag_id}.py"))
        assert not bag.import_errors, bag.import_errors
        capfd.readouterr()  # the task logs of this run only
        dag_run = bag.get_dag(dag_id).test(
            run_conf=conf, **({"logical_date": pendulum.parse(logical_date)} if logical_date else {})
        )
        out, err = capfd.readouterr()
        returncode = 0 if dag_run.state == DagRunState.SUCCESS else 1
        return DagRun(returncode, out + err, dag_run.run_id, _xcoms(airflow_db, dag_id, dag_run.run_id))

    return run


@pytest.fixture
def run_task(airflow_db, tmp_path):
    """`run_task(dag_id, task_id)` runs one task again in the DAG's latest run, as a retry or a clear does
    (`airflow tasks test DAG TASK RUN_ID`), with this test's run root."""

    def run(dag_id: str, task_id: str) -> DagRun:
        run_id = latest_run_id(airflow_db, dag_id)
        assert run_id, f"no dag run of {dag_id}"
        result = airflow_cli(
            "tasks", "test", dag_id, task_id, run_id, env={"PARALLEL_STEPS_HOME": str(tmp_path / "runs")}, timeout=600
        )
        return DagRun(result.returncode, result.stdout + result.stderr, run_id, _xcoms(airflow_db, dag_id, run_id))

    return run


def latest_run_id(airflow_db: Path, dag_id: str) -> str | None:
    with sqlite3.connect(airflow_db) as db:
        row = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)).fetchone()
    return row[0] if row else None


def _xcoms(airflow_db: Path, dag_id: str, run_id: str) -> dict[tuple[str, int, str], Any]:
    # SQLite hands JSON numbers back as numbers, everything else as JSON text.
    with sqlite3.connect(airflow_db) as db:
        return {
            (task, index, key): json.loads(value) if isinstance(value, str) else value
            for task, index, key, value in db.execute(
                "SELECT task_id, map_index, key, value FROM xcom WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)
            )
        }


@dataclass
class TaskInstance:
    """What `execute()` reads from the task instance in a context, plus the XComs it pushes."""

    dag_id: str = "dag"
    task_id: str = "step"
    run_id: str = "manual__2026-01-01T00:00:00+00:00"
    map_index: int = -1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.fixture
def context():
    """`context(params=..., **ti_fields)`: an execution context for calling an operator directly."""

    def make(params: dict[str, Any] | None = None, **ti: Any) -> dict[str, Any]:
        return {"ti": TaskInstance(**ti), "params": dict(params or {})}

    return make
