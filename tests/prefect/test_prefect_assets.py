"""`parallel_run` and Prefect assets, in real flow runs against the suite's Prefect server: a succeeded step
materializes its output folder as an asset (the run's facts as the event's payload, its inputs as the assets
it read), visible through the server's events API; a failed step materializes nothing. The task run also
links to its report."""

from __future__ import annotations

from pathlib import Path

from prefect_helpers import artifacts, events_of, flow_run_id, wait_for

from parallel_steps.prefect import parallel_run
from prefect import flow

SUCCEEDED = "prefect.asset.materialization.succeeded"
ECHO = """
    def run(mini_batch):
        return [open(path).read().strip() for path in mini_batch]
"""
FAILING = """
    def run(mini_batch):
        raise ValueError("no score today")
"""


@flow
def one_step(**fields):
    return parallel_run(**fields)


def test_a_succeeded_step_materializes_its_output_with_the_runs_facts(write_script, make_files, tmp_path):
    script, data, output = write_script(ECHO), make_files(6), tmp_path / "lake" / "scores"
    state = one_step(
        name="scores",
        entry_script=str(script),
        inputs=str(data),
        output=str(output),
        mini_batch_size=2,
        process_count_per_node=1,
        return_state=True,
    )
    summary = state.result()
    assert summary["status"] == "Succeeded"

    (event,) = wait_for(lambda: events_of(output.as_uri(), SUCCEEDED), 60, "the materialization event")
    assert event.payload == {
        "run_id": summary["run_id"],
        "status": "Succeeded",
        "reused": False,
        "rows_written": 6,
        "mini_batches_run": 3,
        "mini_batches_reused": 0,
        "mini_batches_failed": 0,
        "items_succeeded": 6,
        "items_failed": 0,
        "output_file": Path(summary["output_file"]).as_uri(),
        "report": summary["report"],
    }
    related = {(resource.id, resource.role) for resource in event.related}
    assert (data.as_uri(), "asset") in related  # the input it read
    assert ("parallel-steps", "asset-materialized-by") in related
    assert wait_for(lambda: events_of(data.as_uri(), "prefect.asset.referenced"), 60, "the input's reference event")

    (link,) = artifacts(flow_run_id(state), "scores-report-link")
    assert link.type == "markdown"  # Prefect keeps a link artifact as markdown
    assert Path(summary["report"]).as_uri() in link.data


def test_a_failed_step_materializes_nothing(write_script, make_files, tmp_path):
    script, data, output = write_script(FAILING), make_files(2), tmp_path / "lake" / "nothing"
    state = one_step(
        name="fails",
        entry_script=str(script),
        inputs=str(data),
        output=str(output),
        process_count_per_node=1,
        run_max_try=1,
        mini_batch_error_threshold=0,
        return_state=True,
    )
    assert state.is_failed()
    # events reach the server in the order they were emitted: once the flow run's end is there, the task
    # run's asset events, emitted before it, would be too
    flow_run = f"prefect.flow-run.{flow_run_id(state)}"
    assert wait_for(lambda: events_of(flow_run, "prefect.flow-run.Failed"), 60, "the flow run's end")
    assert events_of(output.as_uri()) == []
