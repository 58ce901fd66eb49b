"""OpenLineage events of a parallel step task, from a real task run (`airflow dags test`) with the
OpenLineage provider's file transport: the input and output datasets in OpenLineage's naming, the Parquet
input's schema, the output's statistics and the step's own run facet."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

DAG_ID, TASK_ID = "parallel_run_lineage", "double"
ROWS = 30


def test_openlineage_events_carry_the_datasets_the_parquet_schema_and_the_output_statistics(
    airflow_db, airflow, tmp_path
):
    data, out, events = tmp_path / "tables", tmp_path / "out", tmp_path / "openlineage.jsonl"
    data.mkdir()
    for part in range(2):
        ids = range(part * ROWS // 2, (part + 1) * ROWS // 2)
        pq.write_table(
            pa.table({"id": pa.array(ids, pa.int64()), "value": [float(i) for i in ids]}), data / f"{part}.parquet"
        )
    env = {
        "PARALLEL_STEPS_HOME": str(tmp_path / "runs"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "parallel-steps-tests",
    }
    result = airflow(
        "dags", "test", DAG_ID, "-c", json.dumps({"data": str(data), "out": str(out)}), env=env, timeout=600
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]

    task_events = [
        event
        for event in map(json.loads, events.read_text().splitlines())
        if event.get("job", {}).get("name") == f"{DAG_ID}.{TASK_ID}"
    ]
    by_type = {event["eventType"]: event for event in task_events}
    assert set(by_type) == {"START", "COMPLETE"}, [event["eventType"] for event in task_events]
    start, complete = by_type["START"], by_type["COMPLETE"]

    schema = [{"name": "id", "type": "int64"}, {"name": "value", "type": "double"}]
    for event in (start, complete):
        (dataset,) = event["inputs"]
        assert (dataset["namespace"], dataset["name"]) == ("file", str(data))
        assert [dict(name=f["name"], type=f["type"]) for f in dataset["facets"]["schema"]["fields"]] == schema
        (output,) = event["outputs"]
        assert (output["namespace"], output["name"]) == ("file", str(out))

    (output,) = complete["outputs"]
    written = out / "doubled.parquet"
    statistics = output["outputFacets"]["outputStatistics"]
    assert (statistics["rowCount"], statistics["size"], statistics["fileCount"]) == (ROWS, written.stat().st_size, 1)
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == ["id", "doubled"]
    assert pq.read_table(written).num_rows == ROWS

    facet = complete["run"]["facets"]["parallelSteps"]
    assert (facet["status"], facet["reused"], facet["error_groups"]) == ("Succeeded", False, [])
    assert facet["counts"]["rows_written"] == ROWS
    assert facet["counts"]["mini_batches_failed"] == 0
    assert facet["run_id"].startswith(f"airflow.{DAG_ID}.{TASK_ID}.")
