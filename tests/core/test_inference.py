"""Batch inference on the engine: a table's next mini-batch is read while one runs (the worker's journal says
which), the run says where its workers' time went (run.json and the report), several workers share a GPU
when asked, each seeing only it, and the fields' bad values are one line naming the field."""

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_steps import ConfigError, ParallelRunConfig, TabularDataset, run_step

from .conftest import cli, output_lines

IDS = "import time\n\ndef run(frame):\n    time.sleep(0.1)  # a model at work\n    return frame[['id']]\n"
BOTH_READY = """
import os, time
from pathlib import Path
from parallel_steps import EntryScript

def init():  # each worker says it is ready, and which GPU it sees
    Path("ready").mkdir(exist_ok=True)
    Path("ready", EntryScript().agent_name).write_text(os.environ["CUDA_VISIBLE_DEVICES"])

def wait_for(workers):  # hold the work until that many workers are ready (at most 20 s)
    deadline = time.time() + 20
    while len(os.listdir("ready")) < workers and time.time() < deadline:
        time.sleep(0.05)

"""
PROCESSED = "logs/sys/job_report/processed_mini-batches.csv"
JOURNAL_LINE = re.compile(r"mini_batch=(\d+) attempt=1 .* input=[\d.]+s(?: read_ahead_during=(\d+))?$")


def table(tmp_path, row_groups: int = 4) -> tuple[Path, int]:
    """A Parquet file of `row_groups` row groups of 100 rows; and the size of one (a mini-batch each)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": range(100 * row_groups)}), path, row_group_size=100)
    return path, pq.ParquetFile(path).metadata.row_group(0).total_byte_size


def journal(summary) -> dict[int, int | None]:
    """Mini-batch -> the mini-batch that ran while it was read ahead (None: read when it ran), from the
    worker's journal (logs/sys/node/<node>/processNNN.txt)."""
    lines = Path(summary["run_dir"], "logs", "sys", "node").rglob("process*.txt")
    found = [JOURNAL_LINE.search(line) for path in lines for line in path.read_text().splitlines()]
    return {int(m[1]): None if m[2] is None else int(m[2]) for m in found if m}


def run_table(tmp_path, write_script, row_groups: int = 4, **fields):
    """A run of one worker over `table(tmp_path, row_groups)`, a mini-batch per row group."""
    path, size = table(tmp_path, row_groups)
    write_script(IDS)
    inputs = [TabularDataset(path=[str(path)])]
    return run_step(
        ParallelRunConfig(
            entry_script="score.py", inputs=inputs, mini_batch_size=size, process_count_per_node=1, **fields
        )
    )


def test_each_table_mini_batch_is_read_while_the_one_before_it_runs(tmp_path, write_script):
    summary = run_table(tmp_path, write_script)
    assert journal(summary) == {0: None, 1: 0, 2: 1, 3: 2}
    assert sorted(output_lines(summary), key=int) == [str(i) for i in range(400)]  # every row once


def test_read_ahead_zero_reads_each_mini_batch_when_it_runs(tmp_path, write_script):
    summary = run_table(tmp_path, write_script, read_ahead=0)
    assert journal(summary) == {0: None, 1: None, 2: None, 3: None}


def test_a_mini_batch_larger_than_read_ahead_is_read_when_it_runs(tmp_path, write_script):
    _, size = table(tmp_path, row_groups=2)
    summary = run_table(tmp_path, write_script, row_groups=2, read_ahead=size - 1)
    assert journal(summary) == {0: None, 1: None}


def test_run_json_and_the_report_say_where_each_workers_time_went(tmp_path, make_files, write_script):
    """Two workers, one mini-batch: one worker ran it, the other was idle all its life."""
    make_files(3)
    write_script(BOTH_READY + "def run(mini_batch):\n    wait_for(2)\n    time.sleep(0.1)\n    return mini_batch\n")
    summary = run_step(
        ParallelRunConfig(entry_script="score.py", inputs=["data"], mini_batch_size=3, process_count_per_node=2)
    )
    times = json.loads(Path(summary["run_dir"], "run.json").read_text())["worker_time"]
    assert times == summary["worker_time"]
    workers = times["workers"]
    assert sorted(workers) == ["node0/process000", "node0/process001"]
    for spent in workers.values():
        assert spent["run_s"] + spent["input_s"] + spent["idle_s"] == pytest.approx(spent["alive_s"], abs=0.005)
    [ran] = {line.split(",")[3] for line in Path(summary["run_dir"], PROCESSED).read_text().splitlines()[1:]}
    busy, idle = workers.pop(f"node0/{ran}"), workers.popitem()[1]
    assert busy["run_s"] >= 0.1
    assert (idle["run_s"], idle["input_s"], idle["idle_s"]) == (0, 0, idle["alive_s"])
    assert times["run_share"] + times["input_share"] + times["idle_share"] == pytest.approx(1, abs=0.001)
    page = Path(summary["report"]).read_text()
    assert '<table id="worker-time">' in page
    for worker in workers:
        assert f"<code>{worker}</code>" in page


def test_workers_share_a_gpu_when_asked_and_each_sees_only_its_own(make_files, write_script, monkeypatch):
    monkeypatch.setenv("PARALLEL_STEPS_GPU_COUNT", "2")
    make_files(4)
    write_script(BOTH_READY + "def run(mini_batch):\n    wait_for(4)\n    return mini_batch\n")
    summary = run_step(
        ParallelRunConfig(entry_script="score.py", inputs=["data"], mini_batch_size=1, workers_per_gpu=2)
    )
    assert summary["workers_started"] == 4  # the default process count: GPUs x workers_per_gpu
    seen = {path.name: path.read_text() for path in Path("ready").iterdir()}
    assert seen == {"process000": "0", "process001": "1", "process002": "0", "process003": "1"}


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("workers_per_gpu", "0", "greater than or equal to 1"),
        ("workers_per_gpu", "17", "less than or equal to 16"),
        ("workers_per_gpu", "many", "valid integer"),
        ("read_ahead", "lots", "is not a size"),
        ("read_ahead", "-1", "is not a size"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field_and_nothing_is_written(tmp_path, make_files, option, value, said):
    make_files(2)
    (tmp_path / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    done = cli("run", "--entry-script", "score.py", "--input", "data", "--set", f"{option}={value}", "--output", "out")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert option in line
    assert said in line
    assert not (tmp_path / "out").exists()


def test_bad_values_through_the_api_name_the_field():
    with pytest.raises(ConfigError, match="workers_per_gpu"):
        ParallelRunConfig(entry_script="score.py", inputs=["data"], workers_per_gpu=0)
    with pytest.raises(ConfigError, match="read_ahead"):
        ParallelRunConfig(entry_script="score.py", inputs=["data"], read_ahead="1 lorry")
