"""Azure ML's oj-sales pipeline as a Prefect flow (flows/azure_oj_sales_pipeline.py), run for real: the
command job's task run, then the parallel job's `parallel_run`, with a job input set by the flow run."""

import runpy

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId
from prefect_helpers import FLOWS, flow_run_id


def test_the_oj_sales_pipeline_runs_as_a_flow(azure_examples, monkeypatch):
    monkeypatch.setenv("PARALLEL_STEPS_AZURE_EXAMPLES", str(azure_examples))
    flow = runpy.run_path(str(FLOWS / "azure_oj_sales_pipeline.py"))["oj_sales_pipeline"]
    flow = flow.with_options(name="azure-oj-sales-pipeline")

    fields = {"node_count": 1, "process_count_per_node": 1}  # the file asks for 2 x 2 workers
    state = flow(inputs={"parallel_train.lagging_orders": "1,2,3"}, fields=fields, return_state=True)

    assert state.is_completed(), state.message
    results = state.result()
    assert list(results) == ["partition_job", "parallel_train"]
    assert results["partition_job"]["status"] == "Succeeded"
    train = results["parallel_train"]
    assert (train["status"], train["mini_batches_total"]) == ("Succeeded", 9)
    assert "--lagging_orders 1,2,3" in " ".join(train["config"]["arguments"])
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[flow_run_id(state)]))
        )
    ordered = sorted(runs, key=lambda run: run.start_time)
    assert [(run.name.split("-")[0], run.state.name) for run in ordered] == [
        ("partition_job", "Completed"),
        ("parallel", "Completed"),  # parallel-train, the step's name
    ]  # the command job first, then the parallel job that reads its output
