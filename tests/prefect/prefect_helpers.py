"""Readers for what a flow run left in Prefect, and waits; shared by the Prefect suite's modules."""

import json
import os
import time
from pathlib import Path
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    TaskRunFilter,
    TaskRunFilterFlowRunId,
)
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

REPO = Path(__file__).resolve().parents[2]
FLOWS = REPO / "flows"


def artifacts(flow_run_id: UUID, key: str) -> list:
    """The artifacts with `key` that one flow run created."""
    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
            )
        )


def table(flow_run_id: UUID, key: str) -> list[dict]:
    """The rows of the one table artifact with `key` of a flow run."""
    found = artifacts(flow_run_id, key)
    assert len(found) == 1, f"expected one {key!r} artifact, found {len(found)}"
    data = found[0].data
    return json.loads(data) if isinstance(data, str) else data


def summary_table(flow_run_id: UUID, step: str) -> dict:
    """The run-summary table artifact of a step, as {field: value}."""
    return {row["field"]: row["value"] for row in table(flow_run_id, f"{step}-summary")}


def task_states(flow_run_id: UUID) -> dict[str, str]:
    """{task run name: state name} of a flow run."""
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[flow_run_id]))
        )
    return {run.name: run.state.name for run in runs}


def flow_run_id(state) -> UUID:
    return state.state_details.flow_run_id


def events_of(resource: str, prefix: str = "prefect.asset.") -> list:
    """The asset events the server has about one resource (an asset key), the latest first."""
    with get_client(sync_client=True) as client:
        page = client.read_events(
            filter=EventFilter(event=EventNameFilter(prefix=[prefix]), resource=EventResourceFilter(id=[resource])),
            limit=50,  # the server's maximum (the client's default is more)
        )
    return page.events


def wait_for(predicate, timeout: float = 120, what: str = "a condition"):
    """Poll until `predicate()` is truthy (a bound on a wait, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return value


def subprocess_env(prefect_server: dict, **extra: str) -> dict[str, str]:
    """The environment of a process that talks to the test server (flow scripts, `flow.serve`)."""
    return {**os.environ, **prefect_server, **extra}
