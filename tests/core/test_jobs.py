"""Job control: detached runs followed with status, logs and wait; cancel; runs and clean; concurrency."""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from parallel_steps import ParallelRunStep

from .conftest import cli, cli_json

SLOW = """
import os, time
from pathlib import Path
def init():
    Path("pids", str(os.getpid())).touch()
def run(mini_batch):
    while os.environ.get("GATE") and not Path(os.environ["GATE"]).exists():  # held until the test opens it
        time.sleep(0.02)
    time.sleep(float(os.environ.get("SLEEP", "0.2")))
    return mini_batch
"""


@pytest.fixture
def slow_step(tmp_path, make_files, write_script):
    make_files(20)
    write_script(SLOW)
    (tmp_path / "pids").mkdir()
    return ["--entry-script", "score.py", "--input", "data", "--mini-batch-size", "1", "--process-count-per-node", "2"]


def detach(args) -> tuple[str, Path]:
    result = cli("run", *args, "--detach")
    assert result.returncode == 0, result.stderr
    run_id, run_dir = result.stdout.split()
    return run_id, Path(run_dir)


def worker_pids(tmp_path) -> list[int]:
    return [int(p.name) for p in (tmp_path / "pids").iterdir()]


def alive(pids) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_detached_run_followed_with_status_logs_and_wait(slow_step, monkeypatch):
    monkeypatch.setenv("GATE", "go")
    run_id, run_dir = detach(slow_step)
    code, status = cli_json("status", run_id)
    assert code == 0
    assert status["status"] in ("Queued", "Running")  # its mini-batches wait for the gate
    assert status["run_id"] == run_id
    Path("go").touch()
    follow = subprocess.run(
        [sys.executable, "-m", "parallel_steps.cli", "logs", run_id, "--follow"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "20 mini-batches planned" in follow.stdout
    assert "Succeeded: every mini-batch succeeded" in follow.stdout
    code, summary = cli_json("wait", str(run_dir))
    assert code == 0
    assert summary["status"] == "Succeeded"
    assert summary["items_succeeded"] == 20
    listing = cli("status", run_id, "--mini-batches")
    assert listing.stdout.count(" succeeded ") == 20
    assert "worker=node0/process00" in listing.stdout
    story = cli("logs", run_id, "--mini-batch", "3").stdout
    assert story.startswith("mini-batch 3: succeeded after 1 attempt(s); data/f0003.txt")
    assert "mini_batch=3 attempt=1 items=1 succeeded=1" in story


def test_cancel_stops_a_detached_run_and_its_workers(tmp_path, slow_step):
    run_id, _run_dir = detach([*slow_step, "--set", "environment_variables={SLEEP: '5'}"])
    deadline = time.monotonic() + 60
    while len(worker_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert cli("cancel", run_id).returncode == 0
    code, summary = cli_json("wait", run_id, "--timeout", "30")
    assert code == 1
    assert summary["status"] == "Canceled"
    assert summary["status_reason"] == "canceled by the user"
    assert alive(worker_pids(tmp_path)) == []
    again = cli("cancel", run_id)
    assert again.returncode == 2
    assert "already ended: Canceled" in again.stderr


def test_status_of_a_run_whose_driver_was_killed(tmp_path, slow_step):
    process = subprocess.Popen(
        [sys.executable, "-m", "parallel_steps.cli", "run", *slow_step],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(worker_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    process.kill()
    process.wait()
    run_id = next(p.name for p in Path("runs").iterdir() if p.name.startswith("parallel-run"))
    _code, status = cli_json("status", run_id)
    assert status["status"] == "Failed"
    assert "driver process is gone" in status["status_reason"]
    deadline = time.monotonic() + 10
    while alive(worker_pids(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(worker_pids(tmp_path)) == []


def test_a_second_driver_on_a_running_run_stops_at_once_and_changes_nothing(tmp_path, slow_step, monkeypatch):
    monkeypatch.setenv("GATE", "go")
    run_id, run_dir = detach(slow_step)
    deadline = time.monotonic() + 60
    while len(worker_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    second = cli("run", *slow_step, "--run-dir", str(run_dir))
    assert second.returncode == 2
    (line,) = second.stderr.splitlines()
    assert f"{run_dir}: another driver is running this run (pid " in line
    Path("go").touch()  # the first run's mini-batches go on
    code, summary = cli_json("wait", run_id, "--timeout", "120")
    assert (code, summary["status"], summary["mini_batches_succeeded"]) == (0, "Succeeded", 20)
    assert sorted(Path(summary["output_file"]).read_text().splitlines()) == sorted(map(str, Path("data").iterdir()))
    assert (run_dir / "logs" / "sys" / "master_role.txt").read_text().count(f"run {run_id} of step") == 1
    resumed = cli("run", *slow_step, "--run-dir", str(run_dir))  # the driver has ended: the lock is free
    assert resumed.returncode == 0, resumed.stderr


def test_python_submit_handle(slow_step, monkeypatch):
    monkeypatch.setenv("SLEEP", "0.01")
    handle = ParallelRunStep(
        entry_script="score.py", inputs=["data"], mini_batch_size=5, process_count_per_node=1
    ).submit()
    assert handle.status() in ("Queued", "Running", "Succeeded")
    summary = handle.wait(timeout=120)
    assert summary["status"] == handle.status() == "Succeeded"
    assert summary["mini_batches_total"] == 4
    assert "4 mini-batches planned" in handle.logs()


def test_runs_lists_and_clean_removes_but_never_a_running_one(tmp_path, slow_step):
    for size in ("4", "5"):
        cli("run", *slow_step, "--set", f"mini_batch_size={size}", "--set", "environment_variables={SLEEP: '0'}")
    for pid in (tmp_path / "pids").iterdir():
        pid.unlink()
    running_id, _ = detach([*slow_step, "--set", "environment_variables={SLEEP: '5'}", "--name", "long-one"])
    deadline = time.monotonic() + 60
    while len(worker_pids(tmp_path)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    listing = cli("runs")
    assert listing.stdout.count("Succeeded") == 2
    assert "Running" in listing.stdout
    assert "long-one" in cli("runs", "--name", "long-one").stdout
    removed = cli("clean", "--keep", "0")
    assert removed.returncode == 0
    assert "removed 2 run(s)" in removed.stdout
    assert [r["run_id"] for r in json.loads(cli("runs", "--json").stdout)] == [running_id]
    cli("cancel", running_id)
    cli("wait", running_id)


def test_two_runs_with_the_same_key_at_once_never_interleave(tmp_path, make_files, write_script):
    make_files(30)
    write_script("import time\ndef run(mb):\n    time.sleep(0.05)\n    return mb\n")
    command = [
        sys.executable,
        "-m",
        "parallel_steps.cli",
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "2",
        "--process-count-per-node",
        "1",
        "--output",
        "shared",
        "--json",
    ]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    summaries = [json.loads(p.communicate(timeout=180)[0]) for p in (first, second)]
    assert all(s["status"] == "Succeeded" for s in summaries)
    assert sorted(s["reused"] for s in summaries) == [False, True], "the second waited, then reused"
    lines = Path("shared/parallel_run_step.txt").read_text().splitlines()
    assert lines == [f"data/f{i:04d}.txt" for i in range(30)]
