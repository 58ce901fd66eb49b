"""Trigger-time input through the REST API of a running Airflow 3 (the suite's shared deployment, see
deployment.py): a conf may change the fields open to trigger-time input (mini_batch_size, error_threshold)
and fails the task, naming the field, when it tries the code that runs (entry_script).

Whoever triggers logs in as a SimpleAuthManager user with the "user" role: allowed to trigger DAGs and read
their logs and XComs, not to write DAG files - the privilege the trust boundary is about.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from deployment import Deployment, deployed, wait_for_dags

pytestmark = pytest.mark.slow

DAG_ID = "parallel_run_rest"
TASK_ID = "score"
FILES = 3
USER = "trigger"

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


@deployed
def _write_dag(home: Path) -> None:
    data = home / "rest-data"
    data.mkdir()
    for i in range(FILES):
        (data / f"f{i}.txt").write_text(f"{i}\n")
    script = home / "rest-score.py"
    script.write_text(SCORE)
    dag = DAG.format(dag_id=DAG_ID, task_id=TASK_ID, script=str(script), inputs=str(data), files=FILES)
    (home / "bundles" / "dags" / f"{DAG_ID}.py").write_text(textwrap.dedent(dag))


@pytest.fixture(scope="module")
def airflow_api(airflow_deployment) -> Deployment:
    wait_for_dags(airflow_deployment, USER, DAG_ID)
    return airflow_deployment


@pytest.fixture
def excused_process(airflow_api):
    """Airflow's own processes (its components and the LocalExecutor's workers) outlive each test; the
    session fixture stops them and checks that nothing is left."""
    return lambda process, before: process.name().startswith("airflow")


def task_instance(airflow: Deployment, run_id: str) -> dict[str, Any]:
    response = airflow.client(USER).get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}")
    assert response.status_code == 200, response.text
    return response.json()


def task_log(airflow: Deployment, run_id: str, try_number: int) -> list[dict[str, Any]]:
    """The task's log through the task-instance log endpoint, as structured events."""
    response = airflow.client(USER).get(
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/logs/{try_number}",
        params={"full_content": True},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    return response.json()["content"]


def test_a_trigger_conf_through_the_rest_api_overrides_the_open_fields(airflow_api):
    run_id = airflow_api.trigger(USER, DAG_ID, {"mini_batch_size": 1, "error_threshold": 0})
    state = airflow_api.finished(USER, DAG_ID, run_id)
    log = "\n".join(json.dumps(event) for event in task_log(airflow_api, run_id, 1))
    assert state == "success", log
    assert "trigger conf override: mini_batch_size=1, error_threshold=0" in log

    response = airflow_api.xcom(USER, DAG_ID, run_id, TASK_ID)
    assert response.status_code == 200, response.text
    summary = response.json()["value"]
    assert summary["status"] == "Succeeded"
    assert (summary["config"]["mini_batch_size"], summary["config"]["error_threshold"]) == (1, 0)
    assert (summary["mini_batches_total"], summary["items_succeeded"]) == (FILES, FILES)  # the DAG's own size makes one
    assert Path(summary["output_file"]).read_text().split() == [str(i) for i in range(FILES)]
    assert Path(summary["run_dir"]).is_relative_to(airflow_api.runs)


def test_a_trigger_conf_through_the_rest_api_may_not_change_the_entry_script(airflow_api):
    other, mark = airflow_api.home / "other.py", airflow_api.home / "other-ran"
    other.write_text(OTHER.format(mark=str(mark)))
    before = set(airflow_api.runs.rglob("*"))
    run_id = airflow_api.trigger(USER, DAG_ID, {"entry_script": str(other)})
    assert airflow_api.finished(USER, DAG_ID, run_id) == "failed"

    task = task_instance(airflow_api, run_id)
    assert (task["state"], task["try_number"]) == ("failed", 1)  # a configuration error is not retried
    events = task_log(airflow_api, run_id, task["try_number"])
    errors = [error for event in events for error in event.get("error_detail") or []]
    assert [e["exc_type"] for e in errors] == ["AirflowFailException"], json.dumps(events, indent=1)
    message = errors[0]["exc_value"]
    assert len(message.splitlines()) == 1
    assert "entry_script: may not be set by trigger-time input" in message
    assert "params_override=[..., 'entry_script']" in message

    assert airflow_api.xcom(USER, DAG_ID, run_id, TASK_ID).status_code == 404  # no summary
    assert set(airflow_api.runs.rglob("*")) == before  # the step never started: no run directory
    assert not mark.exists()  # and the other script was never imported
