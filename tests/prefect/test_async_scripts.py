"""An entry script with `async def run` in a real flow run: the OpenAI batch example (examples/openai_batch),
its step file used as written, sends every request of its batch file to an OpenAI-compatible server on a
loopback port (tests/model_server.py) through the `parallel_run` task, with four mini-batches in flight in
its one worker, and its output holds one answer per request."""

import json
import shutil
from pathlib import Path

from prefect_helpers import flow_run_id, summary_table

from model_server import ModelServer
from parallel_steps.prefect import parallel_run
from prefect import flow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_batch"
ROW_BYTES = "64B"  # below the shortest request line: each mini-batch holds one row


@flow
def send_requests(step_file: str, base_url: str):
    return parallel_run(
        step_file,
        arguments=["--base-url", base_url],
        mini_batch_size=ROW_BYTES,
        max_concurrency_per_worker=4,
        process_count_per_node=1,
    )


def test_the_openai_batch_example_keeps_four_requests_in_flight_in_one_worker_and_answers_each_once(tmp_path):
    step = tmp_path / "openai_batch"
    shutil.copytree(EXAMPLE, step, ignore=shutil.ignore_patterns("out", "__pycache__"))
    requests = [json.loads(line)["custom_id"] for line in (step / "requests.jsonl").read_text().splitlines()]

    with ModelServer(latency_s=0.2, max_concurrency=16) as server:
        state = send_requests(str(step / "step.yaml"), server.url, return_state=True)

    assert state.is_completed(), state.message
    summary = state.result()
    assert summary["status"] == "Succeeded"
    assert summary["mini_batches_total"] == len(requests) == 40  # one row each
    assert (summary["workers_started"], server.max_in_flight) == (1, 4)
    assert Path(summary["output_file"]) == step / "out" / "results.jsonl"
    lines = [json.loads(line) for line in Path(summary["output_file"]).read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(requests)
    assert all(line["response"] is not None and line["error"] is None for line in lines)
    assert server.completed == len(requests)
    shown = summary_table(flow_run_id(state), "openai-batch")
    assert (shown["status"], shown["config.max_concurrency_per_worker"]) == ("Succeeded", 4)
