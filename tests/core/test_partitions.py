"""One step over many partitions (`partitions`, issue 49): the CLI and `run_step`, as a user runs a backfill.

The data is one folder per day; the entry script returns, per file, `<day of the file> <its content>`, and
records every init() call and every mini-batch's days in files, so the tests see what ran where.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from parallel_steps import ParallelRunConfig, run_step
from parallel_steps.errors import StepFailed

from .conftest import CLI, cli, cli_json

DAYS = {"2026-01-01": 7, "2026-01-02": 4, "2026-01-03": 5}

SCRIPT = """
import os, time, uuid
from pathlib import Path

def init():
    Path(os.environ["TRACE"], "init-" + uuid.uuid4().hex).touch()

def run(mini_batch):
    days = sorted({Path(p).parent.name for p in mini_batch})
    Path(os.environ["TRACE"], "batch-" + uuid.uuid4().hex).write_text(" ".join(days))
    if os.environ.get("FAIL_DAY") in days:
        raise ValueError("cannot score " + os.environ["FAIL_DAY"])
    if os.environ.get("BLOCK_DAY") in days:
        Path(os.environ["TRACE"], "blocked").touch()
        while Path(os.environ["TRACE"], "blocked").exists():
            time.sleep(0.05)
    return [f"{Path(p).parent.name} {Path(p).read_text().strip()}" for p in mini_batch]
"""


@pytest.fixture
def days(tmp_path, write_script, monkeypatch):
    """The data (one folder per day), the script, a trace folder; the step file `step.yaml`."""
    for day, count in DAYS.items():
        folder = tmp_path / "data" / day
        folder.mkdir(parents=True)
        for n in range(count):
            (folder / f"f{n}.txt").write_text(f"{day}-{n}\n")
    write_script(SCRIPT)
    trace = tmp_path / "trace"
    trace.mkdir()
    monkeypatch.setenv("TRACE", str(trace))
    monkeypatch.chdir(tmp_path)
    step = {
        "name": "daily-scores",
        "entry_script": "score.py",
        "inputs": "data/{partition}/",
        "output": "out",
        "mini_batch_size": 3,
        "process_count_per_node": 2,
        "partitions": {"start": "2026-01-01", "end": "2026-01-03"},
    }
    (tmp_path / "step.yaml").write_text(json.dumps(step))
    return tmp_path


def traced(root: Path, kind: str) -> list[str]:
    return [path.read_text() for path in sorted((root / "trace").glob(f"{kind}-*"))]


def rows_of(root: Path, day: str) -> list[str]:
    return sorted((root / "out" / day / "parallel_run_step.txt").read_text().splitlines())


def expected_rows(day: str) -> list[str]:
    return sorted(f"{day} {day}-{n}" for n in range(DAYS[day]))


def test_a_range_runs_as_one_step_with_mini_batches_cut_inside_each_partition(days):
    code, summary = cli_json("run", "step.yaml")
    assert code == 0, summary
    # At most one init() per worker for the three days (a worker started late may find no work left).
    assert 1 <= len(traced(days, "init")) <= summary["workers_started"] <= 2
    batches = traced(days, "batch")
    assert len(batches) == 3 + 2 + 2  # 7, 4 and 5 files by 3
    assert all(" " not in days_of_batch for days_of_batch in batches)  # never two days in one mini-batch
    partitions = summary["partitions"]
    assert list(partitions) == list(DAYS)
    assert [partitions[day]["mini_batches_total"] for day in DAYS] == [3, 2, 2]
    assert [partitions[day]["items_succeeded"] for day in DAYS] == list(DAYS.values())
    assert summary["partitions_failed"] == []
    for day in DAYS:  # each day's output in its own folder, holding its rows only
        assert rows_of(days, day) == expected_rows(day)
        assert partitions[day]["output_file"] == str(days / "out" / day / "parallel_run_step.txt")
    assert summary["rows_written"] == sum(DAYS.values())
    assert not (days / "out" / "parallel_run_step.txt").exists()


def test_a_failing_partition_fails_the_run_naming_it_and_the_others_are_written(days, monkeypatch):
    monkeypatch.setenv("FAIL_DAY", "2026-01-02")
    result = cli("run", "step.yaml", "--set", "run_max_try=1")
    assert result.returncode == 1
    assert "Failed: 1 of 3 partitions failed (2026-01-02: 2 of 2 mini-batches failed: ValueError: cannot score" in (
        result.stdout
    )
    assert "partitions:   2 succeeded, 1 failed (2026-01-02)" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not (days / "out" / "2026-01-02").exists()  # nothing partial where its output goes
    for day in ("2026-01-01", "2026-01-03"):
        assert rows_of(days, day) == expected_rows(day)


def test_a_rerun_after_one_partitions_input_changed_runs_only_its_mini_batches(days):
    assert cli_json("run", "step.yaml")[0] == 0
    (days / "data" / "2026-01-03" / "f4.txt").write_text("changed\n")
    before = len(traced(days, "batch"))
    code, summary = cli_json("run", "step.yaml")
    assert code == 0, summary
    ran = {day: facts["mini_batches_run"] for day, facts in summary["partitions"].items()}
    assert ran == {"2026-01-01": 0, "2026-01-02": 0, "2026-01-03": 1}
    assert len(traced(days, "batch")) == before + 1
    assert "2026-01-03 changed" in rows_of(days, "2026-01-03")
    assert rows_of(days, "2026-01-01") == expected_rows("2026-01-01")


def test_globs_pick_the_partitions_found_where_the_input_names_them(days):
    (days / "data" / "2025-12-31").mkdir()
    (days / "data" / "2025-12-31" / "f0.txt").write_text("old\n")
    code, summary = cli_json("run", "step.yaml", "--set", "partitions=2026-01-0[23]")
    assert code == 0, summary
    assert list(summary["partitions"]) == ["2026-01-02", "2026-01-03"]
    code, summary = cli_json("run", "step.yaml", "--set", "partitions=*")
    assert list(summary["partitions"]) == ["2025-12-31", *DAYS]


def test_a_hive_style_folder_takes_the_key_between_its_prefix_and_suffix(days):
    for day in DAYS:
        (days / "data" / day).rename(days / "data" / f"day={day}")
    code, summary = cli_json("run", "step.yaml", "--set", "inputs=data/day={partition}/", "--set", "partitions=*")
    assert code == 0, summary
    assert list(summary["partitions"]) == list(DAYS)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("partitions=../secrets", "partitions: '../secrets' is not a partition key: one folder name"),
        ("partitions=2026-01-01/../..", "partitions: '2026-01-01/../..' is not a partition key"),
        ("partitions=..", "partitions: '..' is not a partition key"),
        ("partitions={start: 2026-02-01, end: 2026-01-01}", "partitions: the range 2026-02-01 .. 2026-01-01 is empty"),
        ("partitions=2027-*", "partitions: '2027-*' matches no partition in"),
        ("partitions=2026-01-01,2026-01-01", "partitions: '2026-01-01' is named twice"),
        ("partitions=2026-01-09", "data/2026-01-09: no such file or folder"),
        ("inputs=data", "data names {partition} 0 times; with partitions every input path names it once"),
        ("output=out/{partition}", "out/{partition} names {partition} (give the folder: each partition's output"),
        ("partitions=", "data/{partition} names {partition}, but no partitions are given"),
    ],
)
def test_bad_partitions_are_one_line_naming_the_field_and_nothing_runs(days, override, message):
    result = cli("run", "step.yaml", "--set", override)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not traced(days, "init")
    assert not (days / "out").exists()
    assert not list(Path(os.environ["PARALLEL_STEPS_HOME"]).glob("daily-scores*"))


def test_tables_partitioned_by_folder_cut_by_size_never_cross_a_partition(tmp_path, write_script, monkeypatch):
    for day in DAYS:
        folder = tmp_path / "tables" / day
        folder.mkdir(parents=True)
        lines = ["id,day"] + [f"{n},{day}" for n in range(200)]
        (folder / "part-0.csv").write_text("\n".join(lines) + "\n")
    write_script(
        """
        def run(frame):
            assert frame["day"].nunique() == 1
            return list(frame["day"].astype(str) + " " + frame["id"].astype(str))
        """
    )
    monkeypatch.chdir(tmp_path)
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[{"type": "tabular", "path": "tables/{partition}/"}],
        output="out",
        mini_batch_size="1KB",
        partitions=list(DAYS),
        append_row_file_name="rows.txt",
    )
    summary = run_step(config)
    for day in DAYS:
        assert summary["partitions"][day]["mini_batches_total"] > 1  # cut by size inside the partition
        rows = (tmp_path / "out" / day / "rows.txt").read_text().splitlines()
        assert sorted(rows) == sorted(f"{day} {n}" for n in range(200))


def test_a_driver_killed_mid_backfill_resumes_with_every_row_of_every_partition_once(days, tmp_path):
    env = {**os.environ, "BLOCK_DAY": "2026-01-03", "PARALLEL_STEPS_HOME": str(tmp_path / "home")}
    command = [*CLI, "run", "step.yaml", "--run-dir", "backfill", "--set", "process_count_per_node=1"]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (days / "trace" / "blocked").exists():
            assert time.monotonic() < deadline
            assert driver.poll() is None
            time.sleep(0.05)
        workers = psutil.Process(driver.pid).children(recursive=True)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    psutil.wait_procs(workers, timeout=30)
    assert not any(worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE for worker in workers)
    (days / "trace" / "blocked").unlink()
    code, summary = cli_json("run", "step.yaml", "--run-dir", "backfill", env={"BLOCK_DAY": ""})
    assert code == 0, summary
    for day in DAYS:
        assert rows_of(days, day) == expected_rows(day)  # every row of every day once


def test_a_step_over_partitions_fails_in_python_with_the_summary(days, monkeypatch):
    monkeypatch.setenv("FAIL_DAY", "2026-01-01")
    config = ParallelRunConfig.from_yaml("step.yaml", run_max_try=1)
    with pytest.raises(StepFailed) as failed:
        run_step(config)
    summary = failed.value.summary
    assert summary["partitions_failed"] == ["2026-01-01"]
    assert summary["partitions"]["2026-01-01"]["status"] == "Failed"
    assert summary["partitions"]["2026-01-02"]["rows_written"] == DAYS["2026-01-02"]
