"""The Azure ML samples of examples/azure as a Prefect flow, run for real: five `parallel_run` tasks given the
samples' ParallelRunConfigs as written for Azure, their outputs read as the notebooks do."""

import runpy

from prefect_helpers import flow_run_id, task_states


def test_the_samples_flow_runs_every_shape_as_written_for_azure(azure_examples):
    flow = runpy.run_path(str(azure_examples / "prefect_flow.py"))["azure_ml_samples"]

    state = flow(return_state=True)

    assert state.is_completed(), state.message
    assert state.result() == {
        "mnist": [40, 2],
        "iris": [150, 5],
        "file_partitions": [6, 6],
        "oj_sales": [72, 19],
        "oj_sales_hive": [72, 19],
    }
    assert set(task_states(flow_run_id(state)).values()) == {"Completed"}
