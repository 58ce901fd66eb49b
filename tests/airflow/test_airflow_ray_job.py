"""Deferrable parallel-run tasks whose driver is a Ray job on a token-protected cluster started with
`ray start --head`: `airflow dags test` submits the job, defers to the trigger, resumes with the summary;
an Airflow process killed mid-run and run again attaches to the same job; a DAG that names the cluster by
a `ray_cluster` connection (`ray_conn_id`) runs with the connection's token, which shows up nowhere."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from ray_head import jobs_client, ray_head_as_client

AIRFLOW = Path(sys.executable).with_name("airflow")
DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def cluster():
    """The cluster, taking TOKEN only, and what every `airflow` process needs to use it: the Variable
    `ray_address`, and the token in the environment (RAY_AUTH_TOKEN)."""
    with ray_head_as_client({"RAY_AUTH_TOKEN": TOKEN}, token=TOKEN) as head, pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_VAR_RAY_ADDRESS", head["address"])
        yield head


def ray_jobs(cluster: dict, run_dir: Path) -> list[str]:
    """The Ray jobs ever submitted for one run (they share its job id up to the attempt number)."""
    base = json.loads((run_dir / "ray_job.json").read_text())["submission_id"].rsplit("-", 1)[0]
    jobs = jobs_client(cluster).list_jobs()
    return sorted(job.submission_id for job in jobs if job.submission_id.startswith(base + "-"))


def test_the_digits_dag_defers_while_its_step_runs_as_a_ray_job(run_dag, cluster):
    run = run_dag("parallel_run_digits_ray_job")
    assert run.returncode == 0, run.log[-5000:]
    assert "[DAG TEST] running trigger in line" in run.log  # the task deferred
    summary = run.xcom("score_digits")
    assert (summary["status"], summary["mini_batches_total"], summary["items_succeeded"]) == ("Succeeded", 45, 450)
    assert summary["config"]["submit_to"] == "ray_job"
    assert f"the driver runs as Ray job {summary['ray_job']}" in run.log
    names = sorted(path.name for path in (DIGITS / "data" / "images").glob("*.png"))
    predicted = [line.split(":")[0] for line in Path(summary["output_file"]).read_text().splitlines()]
    assert predicted == names  # every image once, in plan order
    assert run.xcom("accuracy") > 0.9
    assert ray_jobs(cluster, Path(summary["run_dir"])) == [summary["ray_job"]]


def test_a_killed_airflow_process_run_again_reattaches_to_the_running_job(run_task, cluster, tmp_path):
    data, started, gate = tmp_path / "data", tmp_path / "started", tmp_path / "gate"
    data.mkdir()
    started.mkdir()
    names = [f"f{i}.txt" for i in range(6)]
    for name in names:
        (data / name).write_text(name)
    conf = {"data": str(data), "gate": str(gate), "started": str(started)}
    first = subprocess.Popen(
        [str(AIRFLOW), "dags", "test", "parallel_run_gated_ray_job", "-c", json.dumps(conf)],
        env={**os.environ, "PARALLEL_STEPS_HOME": str(tmp_path / "runs")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(list(started.iterdir())) < 2:  # both workers are in run(): the job is mid-run
        assert first.poll() is None, "airflow dags test ended before the job got its workers running"
        assert time.monotonic() < deadline, "the job never got its workers running"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    (job_file,) = (tmp_path / "runs").rglob("ray_job.json")
    killed_at = job_file.stat().st_mtime_ns

    def open_gate_once_the_task_runs_again() -> None:
        """The task that runs again has written which job it follows; only then may the job finish."""
        deadline = time.monotonic() + 300
        while job_file.stat().st_mtime_ns == killed_at and time.monotonic() < deadline:
            time.sleep(0.2)
        gate.touch()

    opener = threading.Thread(target=open_gate_once_the_task_runs_again)
    opener.start()
    again = run_task("parallel_run_gated_ray_job", "score")
    opener.join()
    assert again.returncode == 0, again.log[-5000:]
    assert "[DAG TEST] running trigger in line" in again.log  # it deferred
    summary = again.xcom("score")
    assert (summary["status"], summary["items_succeeded"], summary["attempts_retried"]) == ("Succeeded", 6, 0)
    assert Path(summary["output_file"]).read_text().splitlines() == names  # one output, no duplicates
    run_dir = Path(summary["run_dir"])
    assert job_file.parent == run_dir  # the run directory of the killed task
    assert ray_jobs(cluster, run_dir) == [summary["ray_job"]]  # one job: the one submitted before the kill
    assert (run_dir / "logs" / "sys" / "master_role.txt").read_text().count("of step score in") == 1  # one driver


def test_a_dag_naming_its_cluster_by_a_connection_runs_with_its_token_which_shows_nowhere(
    run_dag, cluster, airflow_db, monkeypatch, tmp_path
):
    jobs_api = cluster["dashboard"]
    assert httpx.get(f"{jobs_api}/api/jobs/").status_code in (401, 403)  # the cluster takes the token only
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):  # nothing of the cluster in the environment: the connection
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token-file"))
    port = int(jobs_api.rsplit(":", 1)[1])
    connection = dict(conn_type="ray_cluster", host="127.0.0.1", port=port, schema="http", password=TOKEN)
    monkeypatch.setenv("AIRFLOW_CONN_RAY_TEST", json.dumps(connection))
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"f{i}.txt").write_text(str(i))

    run = run_dag("parallel_run_ray_conn", {"data": str(data)})

    assert run.returncode == 0, run.log[-5000:]
    assert "[DAG TEST] running trigger in line" in run.log  # the trigger, too, used the connection
    summary = run.xcom("score")
    assert (summary["status"], summary["items_succeeded"]) == ("Succeeded", 4)
    assert json.loads((Path(summary["run_dir"]) / "ray_job.json").read_text())["address"] == jobs_api
    assert Path(summary["output_file"]).read_text().splitlines() == [f"f{i}.txt" for i in range(4)]
    with sqlite3.connect(airflow_db) as db:
        rendered = db.execute(
            "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ?", ("parallel_run_ray_conn",)
        ).fetchall()
    assert rendered
    logs = [p.read_text(errors="replace") for p in (airflow_db.parent / "logs").rglob("*") if p.is_file()]
    files = [p.read_text(errors="replace") for p in Path(summary["run_dir"]).rglob("*") if p.is_file()]
    for where, text in [("the console", run.log), ("XCom", str(run.xcoms)), ("rendered fields", str(rendered))]:
        assert TOKEN not in text, f"the token is in {where}"
    assert not [text for text in logs + files if TOKEN in text], "the token is in a task log or the run directory"
