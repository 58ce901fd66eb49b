"""An entry script with `async def run` in a real DAG run (`dag.test()`): the OpenAI batch example
(examples/openai_batch), its step file used as written, sends every request of its batch file to an
OpenAI-compatible server on a loopback port (tests/model_server.py) from a ParallelRunOperator, with four
mini-batches in flight in its one worker; the task's XCom is the run summary and the output holds one answer
per request."""

import json
import runpy
import shutil
import sqlite3
from pathlib import Path

from model_server import ModelServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_batch"
ROW_BYTES = "64B"  # below the shortest request line: each mini-batch holds one row

DAG_FILE = """
from airflow.sdk import DAG

from parallel_steps import ParallelRunConfig
from parallel_steps.airflow import ParallelRunOperator

with DAG("openai_batch", schedule=None, catchup=False) as dag:
    ParallelRunOperator(
        task_id="send_requests",
        parallel_run_config=ParallelRunConfig.from_yaml({step_file!r}),
        arguments=["--base-url", {base_url!r}],
        mini_batch_size={row_bytes!r},
        max_concurrency_per_worker=4,
        process_count_per_node=1,
    )
"""


def test_the_openai_batch_example_keeps_four_requests_in_flight_in_one_worker_and_answers_each_once(
    airflow_db, tmp_path, monkeypatch
):
    from airflow import settings

    step = tmp_path / "openai_batch"
    shutil.copytree(EXAMPLE, step, ignore=shutil.ignore_patterns("out", "__pycache__"))
    requests = [json.loads(line)["custom_id"] for line in (step / "requests.jsonl").read_text().splitlines()]

    with ModelServer(latency_s=0.2, max_concurrency=16) as server:
        dags = tmp_path / "dags"
        dags.mkdir()
        dag_file = dags / "openai_batch.py"
        dag_file.write_text(
            DAG_FILE.format(step_file=str(step / "step.yaml"), base_url=server.url, row_bytes=ROW_BYTES)
        )
        # dag.test() syncs the DAG from the DAGs folder's bundle: let it be this test's folder.
        monkeypatch.setattr(settings, "DAGS_FOLDER", str(dags))
        dag = runpy.run_path(str(dag_file))["dag"]
        run = dag.test()

    assert run.state == "success"
    with sqlite3.connect(airflow_db) as db:
        (value,) = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = 'return_value'",
            (dag.dag_id, run.run_id, "send_requests"),
        ).fetchone()
    summary = json.loads(value)
    assert summary["status"] == "Succeeded"
    assert summary["mini_batches_total"] == len(requests) == 40  # one row each
    assert (summary["workers_started"], server.max_in_flight) == (1, 4)
    assert summary["config"]["max_concurrency_per_worker"] == 4
    assert Path(summary["output_file"]) == step / "out" / "results.jsonl"
    lines = [json.loads(line) for line in Path(summary["output_file"]).read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(requests)
    assert all(line["response"] is not None and line["error"] is None for line in lines)
    assert server.completed == len(requests)
