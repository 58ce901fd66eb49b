"""Cancelling a flow run, or interrupting its process, stops every worker of a running step."""

import json
import signal
import subprocess
import sys
import textwrap
import threading

import psutil
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.states import Cancelling
from prefect_helpers import subprocess_env, task_states, wait_for

from parallel_steps.prefect import parallel_run
from prefect import flow

# run() marks that it started (one file per worker pid), then takes far longer than any test.
SLOW = """
    import os, time
    from pathlib import Path

    def init():
        pass

    def run(mini_batch):
        (Path(__file__).parent / "started" / str(os.getpid())).touch()
        time.sleep(600)
        return mini_batch
"""
SLOW_FIELDS = dict(
    mini_batch_size=1, process_count_per_node=2, run_invocation_timeout=900, allow_reuse=False, name="slow"
)


def started_workers(tmp_path) -> list[int]:
    """Pids of the workers whose run() has started, once both have."""
    pids = [int(p.name) for p in (tmp_path / "started").iterdir()]
    return pids if len(pids) == 2 else []


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def run_summary(tmp_path) -> dict:
    (run_dir,) = (tmp_path / "runs").glob("slow-*")
    return json.loads((run_dir / "run.json").read_text())


def test_cancelling_the_flow_run_stops_the_workers(write_script, make_files, tmp_path):
    script, data = write_script(SLOW), make_files(4)
    (tmp_path / "started").mkdir()
    ids, outcome = {}, {}

    @flow
    def slow_flow():
        ids["flow_run"] = FlowRunContext.get().flow_run.id
        return parallel_run(entry_script=str(script), inputs=str(data), **SLOW_FIELDS)

    runner = threading.Thread(target=lambda: outcome.setdefault("state", slow_flow(return_state=True)))
    runner.start()
    workers = wait_for(lambda: started_workers(tmp_path), what="both workers to start run()")
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(ids["flow_run"], Cancelling(message="test cancels"), force=True)
    runner.join(timeout=300)
    assert not runner.is_alive()
    assert alive(workers) == []
    summary = run_summary(tmp_path)
    assert summary["status"] == "Canceled"
    assert "flow run was cancelled" in summary["status_reason"]
    assert summary["mini_batches_succeeded"] == 0
    assert task_states(ids["flow_run"]) == {"slow": "Cancelled"}


FLOW_SCRIPT = """
    from prefect import flow
    from parallel_steps.prefect import parallel_run

    @flow
    def slow_flow():
        return parallel_run(entry_script={script!r}, inputs={data!r}, **{fields!r})

    slow_flow()
"""


def test_a_sigterm_to_the_flow_process_cancels_the_step(write_script, make_files, tmp_path, prefect_server):
    """What a Prefect runner does to cancel a served or deployed flow run: SIGTERM to its process."""
    script, data = write_script(SLOW), make_files(4)
    (tmp_path / "started").mkdir()
    flow_file = tmp_path / "slow_flow.py"
    flow_file.write_text(textwrap.dedent(FLOW_SCRIPT).format(script=str(script), data=str(data), fields=SLOW_FIELDS))
    process = subprocess.Popen(
        [sys.executable, str(flow_file)],
        env=subprocess_env(prefect_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        workers = wait_for(
            lambda: started_workers(tmp_path) or process.poll() is not None, what="both workers to start run()"
        )
        assert process.poll() is None, process.stdout.read()
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert alive(workers) == []
    summary = run_summary(tmp_path)
    assert summary["status"] == "Canceled", output
    assert "interrupted (TerminationSignal)" in summary["status_reason"]
