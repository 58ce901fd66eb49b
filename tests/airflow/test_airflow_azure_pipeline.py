"""Azure ML's oj-sales pipeline as an Airflow DAG (dags/azure_oj_sales_pipeline.py), through `dag.test()`:
the command job, then the ParallelRunOperator of the parallel job, with a job input and a configuration
field set from the trigger conf (what a trigger may set is unit-tested in tests/unit/test_azure_pipeline.py)."""

import pytest


@pytest.fixture
def examples(azure_examples, monkeypatch):
    monkeypatch.setenv("PARALLEL_STEPS_AZURE_EXAMPLES", str(azure_examples))
    return azure_examples


def test_the_oj_sales_pipeline_runs_as_a_dag_with_a_param_override(dag_test, examples):
    conf = {"parallel_train.lagging_orders": "1,2,3", "node_count": 1, "process_count_per_node": 1}
    run = dag_test("azure_oj_sales_pipeline", conf)
    assert run.returncode == 0, run.log[-5000:]
    partition = run.xcom("partition_job")
    assert partition["status"] == "Succeeded"
    train = run.xcom("parallel_train")
    assert (train["status"], train["mini_batches_total"]) == ("Succeeded", 9)  # one per store and brand
    assert train["config"]["node_count"] == 1
    assert "--lagging_orders 1,2,3" in " ".join(train["config"]["arguments"])
    table = partition["outputs"]["tabular_output_data"]
    assert train["config"]["inputs"][0]["path"][0].startswith(table)  # the command's output, read as an MLTable
    assert run.log.index("job partition_job: python partition_data.py") < run.log.index("parallel step parallel-train")
