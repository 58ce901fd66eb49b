"""The served deployment example (flows/serve_tabular.py) against the local Prefect server: a run created
with `run_deployment(..., parameters=...)` executes in the runner's subprocess with the overrides."""

import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect_helpers import FLOWS, REPO, subprocess_env, summary_table, task_states, wait_for

DEPLOYMENT = "score-transactions/score-transactions-served"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(prefect_server, tmp_path_factory):
    """`python flows/serve_tabular.py` as a user starts it, polling for runs every second."""
    root = tmp_path_factory.mktemp("served")
    env = subprocess_env(prefect_server, PREFECT_RUNNER_POLL_FREQUENCY="1", PARALLEL_STEPS_HOME=str(root / "runs"))
    with open(root / "serve.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(FLOWS / "serve_tabular.py")], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            wait_for(lambda: _deployment_exists() or process.poll() is not None, timeout=180, what="the deployment")
            assert process.poll() is None, (root / "serve.log").read_text()
            yield root
        finally:
            process.send_signal(signal.SIGINT)  # what Ctrl-C does: the runner stops and pauses its schedules
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _deployment_exists() -> bool:
    with get_client(sync_client=True) as client:
        try:
            client.read_deployment_by_name(DEPLOYMENT)
        except ObjectNotFound:
            return False
    return True


def test_a_deployment_run_takes_parameter_overrides(served, tmp_path):
    parameters = {
        "input_path": str(tmp_path / "transactions"),
        "output": str(tmp_path / "out"),
        "mini_batch_size": 5,
        "process_count_per_node": 1,
    }
    flow_run = run_deployment(DEPLOYMENT, parameters=parameters, timeout=400, poll_interval=1)
    assert flow_run.state.is_completed(), (flow_run.state, (served / "serve.log").read_text()[-4000:])
    assert flow_run.parameters["mini_batch_size"] == 5
    shown = summary_table(flow_run.id, "score-transactions")
    assert (shown["status"], shown["mini_batches_total"], shown["config.mini_batch_size"]) == ("Succeeded", 16, 5)
    assert shown["config.process_count_per_node"] == 1
    assert task_states(flow_run.id)["score-transactions"] == "Completed"
    assert pq.read_metadata(tmp_path / "out" / "scores.parquet").num_rows == 4 * 4 * 500 - 4
