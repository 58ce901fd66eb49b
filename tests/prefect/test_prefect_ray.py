"""A Prefect flow's step on a running, token-protected Ray cluster (started with `ray start --head`, as a user
starts one): as actors of the flow's own driver (`backend="ray"`, `ray_address`), or as a Ray job
(`submit_to="ray_job"`) that the task follows; a cancelled flow run stops the job; a `RayCluster` block
gives the cluster's address and token, which shows up nowhere.

The job's entry script holds every run() at a gate (a file the test creates), so the job is provably
running while the test cancels the flow run.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, LogFilter, LogFilterFlowRunId
from prefect.context import FlowRunContext
from prefect.states import Cancelling
from prefect_helpers import artifacts, flow_run_id, summary_table, task_states, wait_for

from parallel_steps.prefect import RayCluster, parallel_run, parallel_run_async
from prefect import flow
from ray_head import GATED_NAMES, jobs_client, ray_head_as_client, worker_actors, write_gated_step

TOKEN = secrets.token_hex(16)


@pytest.fixture(scope="module")
def cluster():
    """The cluster, taking TOKEN only; the tests' processes have it in RAY_AUTH_TOKEN."""
    with ray_head_as_client({"RAY_AUTH_TOKEN": TOKEN}, token=TOKEN) as head:
        yield head


@pytest.fixture
def fields(tmp_path: Path, cluster: dict) -> dict:
    """A gated step on 6 files in 3 mini-batches, run by a Ray job on the cluster."""
    write_gated_step(tmp_path)
    return dict(
        name="gated",
        entry_script=str(tmp_path / "code" / "score.py"),
        inputs=str(tmp_path / "data"),
        mini_batch_size=2,
        process_count_per_node=2,
        run_invocation_timeout=600,
        allow_reuse=False,
        environment_variables={"GATE": str(tmp_path / "gate"), "STARTED": str(tmp_path / "started")},
        backend="ray",
        submit_to="ray_job",
        ray_address=cluster["dashboard"],
    )


def job_status(cluster: dict, job_id: str) -> str:
    """The Ray job's status once it has ended (a driver exits a moment after it wrote the run's end)."""
    client = jobs_client(cluster)

    def ended() -> str | None:
        status = client.get_job_status(job_id).value
        return None if status in ("PENDING", "RUNNING") else status

    return wait_for(ended, 60, f"the Ray job {job_id} to end")


ON_RAY = """
    import os
    import ray

    def run(mini_batch):
        node = ray.get_runtime_context().get_node_id()
        return [f"{os.path.basename(path)} {node}" for path in mini_batch]
"""


def test_a_step_runs_on_a_ray_cluster_given_by_ray_address(cluster, write_script, make_files):
    script, data = write_script(ON_RAY), make_files(6)

    @flow
    def on_ray():
        return parallel_run(
            entry_script=str(script),
            inputs=str(data),
            mini_batch_size=2,
            process_count_per_node=2,
            backend="ray",
            ray_address=cluster["address"],
            name="on-ray",
        )

    summary = on_ray()
    assert (summary["status"], summary["mini_batches_total"]) == ("Succeeded", 3)
    assert summary["config"]["backend"] == "ray"
    assert summary["config"]["ray_address"] == cluster["address"]
    lines = [line.split() for line in Path(summary["output_file"]).read_text().splitlines()]
    assert [name for name, _ in lines] == [f"f{i:04d}.txt" for i in range(6)]
    assert len({node for _, node in lines}) == 1  # a Ray node id: run() ran inside a Ray actor
    wait_for(lambda: not worker_actors(cluster), timeout=30, what="the worker actors to exit")


def test_a_flow_runs_its_step_as_a_ray_job(fields, cluster, tmp_path):
    (tmp_path / "gate").touch()

    @flow
    def score():
        return parallel_run(**fields)

    summary = score()
    assert (summary["status"], summary["items_succeeded"], summary["mini_batches_total"]) == ("Succeeded", 6, 3)
    assert summary["config"]["submit_to"] == "ray_job"
    assert Path(summary["output_file"]).read_text().splitlines() == GATED_NAMES
    assert job_status(cluster, summary["ray_job"]) == "SUCCEEDED"


@pytest.mark.parametrize("submit_to", ["ray_job", "local"])
def test_an_async_flow_awaits_its_steps(fields, cluster, tmp_path, submit_to):
    """`parallel_run_async` follows a Ray job on the flow's event loop, and runs a local driver in a thread;
    its artifacts are those of `parallel_run` (Prefect's artifact calls are coroutines in an async task)."""
    (tmp_path / "gate").touch()
    backend = "ray" if submit_to == "ray_job" else "local"

    @flow
    async def score():
        return await parallel_run_async(**{**fields, "backend": backend, "submit_to": submit_to})

    state = asyncio.run(score(return_state=True))
    summary = state.result()
    assert (summary["status"], summary["items_succeeded"], summary["mini_batches_total"]) == ("Succeeded", 6, 3)
    assert summary["config"]["submit_to"] == submit_to
    assert summary_table(flow_run_id(state), "gated")["items_succeeded"] == 6
    assert artifacts(flow_run_id(state), "gated-progress")
    assert Path(summary["output_file"]).read_text().splitlines() == GATED_NAMES
    if submit_to == "ray_job":
        assert job_status(cluster, summary["ray_job"]) == "SUCCEEDED"


def test_cancelling_the_flow_run_stops_the_ray_job(fields, cluster, tmp_path):
    ids, outcome = {}, {}

    @flow
    def score():
        ids["flow_run"] = FlowRunContext.get().flow_run.id
        return parallel_run(**fields)

    runner = threading.Thread(target=lambda: outcome.setdefault("state", score(return_state=True)))
    runner.start()
    wait_for(lambda: len(list((tmp_path / "started").iterdir())) == 2, 180, "both workers to start run()")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(ids["flow_run"], Cancelling(message="test cancels"), force=True)
    runner.join(timeout=300)
    assert not runner.is_alive()
    (run_dir,) = (tmp_path / "runs").glob("gated-*")
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["status"] == "Canceled"
    assert "flow run was cancelled" in summary["status_reason"]
    assert summary["mini_batches_succeeded"] == 0
    ray_job = json.loads((run_dir / "ray_job.json").read_text())["submission_id"]
    assert job_status(cluster, ray_job) == "STOPPED"
    assert task_states(ids["flow_run"]) == {"gated": "Cancelled"}


def test_a_ray_cluster_block_gives_the_cluster_and_its_token_which_shows_nowhere(
    fields, cluster, tmp_path, monkeypatch
):
    (tmp_path / "gate").touch()
    RayCluster(address=cluster["dashboard"], token=TOKEN).save("test-cluster", overwrite=True)
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE"):  # nothing of the cluster in the environment: the block
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token-file"))
    step = {name: value for name, value in fields.items() if name != "ray_address"}

    @flow
    def score(cluster_name: str):
        return parallel_run(**step, ray_cluster=cluster_name)

    state = score("test-cluster", return_state=True)
    summary = state.result()
    assert (summary["status"], summary["items_succeeded"]) == ("Succeeded", 6)
    assert json.loads((Path(summary["run_dir"]) / "ray_job.json").read_text())["address"] == cluster["dashboard"]
    for name, value in cluster["env"].items() | {("RAY_AUTH_TOKEN", TOKEN)}:  # for the test's own look at the job
        monkeypatch.setenv(name, value)
    assert job_status(cluster, summary["ray_job"]) == "SUCCEEDED"
    run = flow_run_id(state)

    def all_logs() -> list | None:  # the flow run's logs, once its last line has reached the server
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run])))
        return logs if any("Finished in state" in log.message and not log.task_run_id for log in logs) else None

    logs = wait_for(all_logs, 60, "the flow run's logs")
    with get_client(sync_client=True) as client:
        shown = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run])))
    assert shown
    texts = [log.message for log in logs] + [str(artifact.data) for artifact in shown] + [json.dumps(summary)]
    texts += [p.read_text(errors="replace") for p in Path(summary["run_dir"]).rglob("*") if p.is_file()]
    assert not [text for text in texts if TOKEN in text], "the token is in a log, an artifact or the run directory"
