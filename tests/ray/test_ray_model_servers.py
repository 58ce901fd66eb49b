"""The async example script (examples/openai_batch) runs unchanged on the Ray backend: each actor keeps several
mini-batches in flight against a real OpenAI-compatible server, and every request line comes back once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from model_server import ModelServer
from parallel_steps import ParallelRunConfig
from parallel_steps.run.step import run_step

EXAMPLE = Path(__file__).parents[2] / "examples" / "openai_batch"


def test_an_async_script_keeps_several_requests_in_flight_per_actor_with_every_row_once(ray_cluster, tmp_path):
    folder = tmp_path / "step"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("out"))
    rows = [json.loads(line)["custom_id"] for line in (folder / "requests.jsonl").read_text().splitlines()]
    with ModelServer(latency_s=0.3, max_concurrency=32) as server:
        config = ParallelRunConfig.from_yaml(
            folder / "step.yaml",
            backend="ray",
            node_count=2,
            arguments=["--base-url", server.url],
            mini_batch_size="64B",  # one request line each
            max_concurrency_per_worker=4,
            run_root=str(tmp_path / "runs"),
        )
        summary = run_step(config)

    assert (summary["mini_batches_total"], summary["items_failed"], summary["workers_started"]) == (len(rows), 0, 2)
    lines = [json.loads(line) for line in Path(summary["output_file"]).read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == sorted(rows)
    assert all(line["error"] is None and line["response"]["status_code"] == 200 for line in lines)
    assert server.max_in_flight >= 2  # a call's mini-batches run at once
