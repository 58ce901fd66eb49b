"""The installed wheel, Prefect environment: a flow calling the `parallel_run` task runs against a temporary
Prefect server and returns the step's summary."""

from pathlib import Path

import pytest
from prefect.testing.utilities import prefect_test_harness

from parallel_steps.prefect import parallel_run
from prefect import flow

COUNT_WORDS = """
from pathlib import Path


def run(mini_batch):
    return [f"{Path(p).name} {len(Path(p).read_text().split())}" for p in mini_batch]
"""


@pytest.fixture(scope="module", autouse=True)
def prefect_server():
    with prefect_test_harness(server_startup_timeout=180):
        yield


@flow
def count_words(data: str, script: str, mini_batch_size: int = 2):
    return parallel_run(entry_script=script, inputs=[data], mini_batch_size=mini_batch_size, process_count_per_node=2)


def test_a_flow_runs_the_parallel_run_task(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(5):
        (data / f"doc{i}.txt").write_text("word " * i)
    (tmp_path / "count_words.py").write_text(COUNT_WORDS)

    summary = count_words(str(data), str(tmp_path / "count_words.py"))

    assert (summary["status"], summary["mini_batches_total"], summary["items_succeeded"]) == ("Succeeded", 3, 5)
    assert sorted(Path(summary["output_file"]).read_text().splitlines()) == [f"doc{i}.txt {i}" for i in range(5)]
