"""The Azure ML samples of examples/azure as an Airflow DAG, run with `dag.test()`: five ParallelRunOperator
tasks built from the samples' ParallelRunConfigs as written for Azure, their outputs read as the notebooks do."""

import json
import runpy
import sqlite3

EXPECTED = {"mnist": [40, 2], "iris": [150, 5], "file_partitions": [6, 6], "oj_sales": [72, 19]}
EXPECTED["oj_sales_hive"] = [72, 19]


def test_the_samples_dag_runs_every_shape_as_written_for_azure(airflow_db, azure_examples, monkeypatch):
    from airflow import settings

    # dag.test() syncs the DAG from the DAGs folder's bundle: let it be the examples' copy.
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(azure_examples))
    dag = runpy.run_path(str(azure_examples / "airflow_dag.py"))["dag"]

    run = dag.test()

    assert run.state == "success"
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == dict.fromkeys(
        ["prepare", *EXPECTED, "results"], "success"
    )
    with sqlite3.connect(airflow_db) as db:
        xcoms = {
            task: json.loads(value) if isinstance(value, str) else value
            for task, value in db.execute(
                "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = 'return_value'",
                (dag.dag_id, run.run_id),
            )
        }
    assert xcoms["results"] == EXPECTED  # rows and columns as each notebook's read_csv and labels give them
    summary = xcoms["file_partitions"]
    assert (summary["mini_batches_total"], summary["config"]["compute_target"]) == (5, "cpu-cluster")
