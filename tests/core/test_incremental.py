"""Incremental reruns: a rerun over a grown or changed input keeps the earlier mini-batches and runs
only what is new or changed (sticky plans), with every row exactly once."""

import json
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from parallel_steps import ParallelRunConfig, StepFailed, TabularDataset
from parallel_steps.run.plan import preview
from parallel_steps.run.step import run_step
from parallel_steps.store.ledger import Ledger

from .conftest import CLI, cli, output_lines

# Each run() call appends one line per mini-batch it ran to calls.log (O_APPEND: whole lines).
SCORE = """
import os, time
from pathlib import Path
SLEEP = float(os.environ.get("SLEEP", "0"))
def run(mini_batch):
    if os.environ.get("FAIL"):
        raise ValueError("not today")
    with open("calls.log", "a") as calls:
        calls.write(Path(mini_batch[0]).name + "\\n")
    time.sleep(SLEEP)
    return [Path(p).read_text().strip() for p in mini_batch]
"""


def add_files(folder: Path, count: int, rng: random.Random) -> list[str]:
    """Files with random (uuid) names, each holding its own name: new ones land all over the listing."""
    folder.mkdir(exist_ok=True)
    names = [f"{uuid.UUID(int=rng.getrandbits(128))}.txt" for _ in range(count)]
    for name in names:
        (folder / name).write_text(name + "\n")
    return names


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.log"
    return path.read_text().split() if path.exists() else []


def reset_calls(tmp_path: Path) -> None:
    (tmp_path / "calls.log").unlink(missing_ok=True)


def config(**fields) -> ParallelRunConfig:
    fields = {
        "entry_script": "score.py",
        "inputs": ["data"],
        "mini_batch_size": 10,
        "process_count_per_node": 2,
        "output": "out",
        **fields,
    }
    return ParallelRunConfig(**fields)


@pytest.fixture
def scored(tmp_path, write_script):
    """2,000 random-named files, scored once; returns the names."""
    write_script(SCORE)
    names = add_files(tmp_path / "data", 2000, random.Random(1))
    first = run_step(config())
    assert first["mini_batches_total"] == 200
    assert first["mini_batches_new"] == 200
    assert first["inputs_new"] == 2000
    reset_calls(tmp_path)
    return names


def test_twenty_new_files_run_as_two_new_mini_batches_and_every_earlier_one_is_reused(tmp_path, scored):
    new = add_files(tmp_path / "data", 20, random.Random(2))
    summary = run_step(config())
    assert summary["mini_batches_total"] == 202
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (200, 2)
    assert (summary["mini_batches_new"], summary["inputs_new"]) == (2, 20)
    assert (summary["inputs_changed"], summary["inputs_deleted"]) == (0, 0)
    assert len(calls(tmp_path)) == 2
    rows = output_lines(summary)
    assert sorted(rows) == sorted(scored + new)  # every row exactly once
    assert len(rows) == len(set(rows))


def test_the_order_is_deterministic_and_documented(tmp_path, scored):
    """Kept mini-batches in listing order; a new one where its last file is listed."""
    new = add_files(tmp_path / "data", 20, random.Random(2))
    first = output_lines(run_step(config()))
    again = output_lines(run_step(config(output="out2", allow_reuse=True)))
    assert first == again
    listing = sorted(scored + new)
    positions = {name: i for i, name in enumerate(listing)}
    batches = [first[i : i + 10] for i in range(0, len(first), 10)]
    last_files = [max(positions[name] for name in batch) for batch in batches]
    assert last_files == sorted(last_files)


def test_one_changed_file_reruns_exactly_one_mini_batch(tmp_path, scored):
    changed = sorted(scored)[1005]
    (tmp_path / "data" / changed).write_text(changed + " v2\n")
    summary = run_step(config())
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (199, 1)
    assert (summary["inputs_changed"], summary["inputs_new"], summary["inputs_deleted"]) == (1, 0, 0)
    assert len(calls(tmp_path)) == 1
    rows = output_lines(summary)
    assert f"{changed} v2" in rows
    assert len(rows) == 2000


def test_one_deleted_file_reruns_its_mini_batch_without_it_and_nothing_else(tmp_path, scored):
    gone = sorted(scored)[501]
    (tmp_path / "data" / gone).unlink()
    summary = run_step(config())
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (199, 1)
    assert summary["inputs_deleted"] == 1
    assert len(calls(tmp_path)) == 1
    rows = output_lines(summary)
    assert gone not in rows
    assert sorted(rows) == sorted(set(scored) - {gone})


def test_allow_reuse_false_runs_everything_afresh(tmp_path, scored):
    add_files(tmp_path / "data", 20, random.Random(2))
    summary = run_step(config(allow_reuse=False))
    assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (0, 202)
    assert len(calls(tmp_path)) == 202


def test_plan_diff_tells_what_would_run_and_why_without_running(tmp_path, scored):
    add_files(tmp_path / "data", 15, random.Random(3))
    (tmp_path / "data" / sorted(scored)[10]).write_text("changed\n")
    (tmp_path / "data" / sorted(scored)[1500]).unlink()

    def files():  # SQLite's shared-memory files of the ledgers it reads aside
        return sorted(str(p) for p in (tmp_path / "runs").rglob("*") if not p.name.endswith(("-shm", "-wal")))

    before = files()
    diff = preview(config())
    assert (diff["kept"], diff["dropped"]) == (198, 2)
    assert (diff["inputs_new"], diff["inputs_changed"], diff["inputs_deleted"]) == (15, 1, 1)
    assert diff["new"] == 4  # 15 new + 9 + 9 files of the two dropped mini-batches = 33 files
    assert diff["reused"] == 198
    assert any("1 changed file(s)" in why for why in diff["why"])
    assert any("1 deleted file(s)" in why for why in diff["why"])
    assert calls(tmp_path) == []
    assert files() == before  # nothing written
    result = cli(
        "plan", "--entry-script", "score.py", "--input", "data", "--mini-batch-size", "10", "--output", "out", "--diff"
    )
    assert result.returncode == 0, result.stderr
    assert "earlier mini-batches kept: 198; new: 4; dropped: 2" in result.stdout
    assert "input files new: 15, changed: 1, deleted: 1" in result.stdout
    code = cli(
        "plan",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "10",
        "--output",
        "out",
        "--diff",
        "--json",
    )
    assert json.loads(code.stdout)["to_run"] == 4


def rerun_command(mini_batch_size: int) -> list[str]:
    """`parallel-steps run` of the step in `config()` into the run folder `rerun`, its summary as JSON."""
    return [
        *CLI,
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        str(mini_batch_size),
        "--process-count-per-node",
        "2",
        "--output",
        "out",
        "--run-dir",
        "rerun",
        "--json",
    ]


def killed_after(command: list[str], env: dict, tmp_path: Path, count: int) -> bool:
    """Start `command`, SIGKILL its driver and workers once run() has been called `count` times; returns
    whether the killed driver's plan was complete."""
    driver = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(calls(tmp_path)) < count:
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    killed = Ledger.open_readonly(Path("rerun", "ledger.sqlite"))
    assert killed is not None
    try:
        return killed.plan_complete()
    finally:
        killed.close()


def resumed(command: list[str], env: dict | None = None) -> dict:
    """The summary of `command` run again to its end."""
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    return json.loads(finished.stdout)


def test_a_driver_killed_during_an_incremental_rerun_resumes_with_every_row_once(tmp_path, scored):
    new = add_files(tmp_path / "data", 300, random.Random(4))
    command, env = rerun_command(10), {**os.environ, "SLEEP": "0.05"}
    # Some of the 30 new mini-batches ran; the plan was written ahead of the workers: the resume keeps it.
    assert killed_after(command, env, tmp_path, 8)
    summary = resumed(command, env)
    rows = output_lines(summary)
    assert sorted(rows) == sorted(scored + new)
    assert len(rows) == len(set(rows))
    assert summary["mini_batches_reused"] == 200  # from the first run; the rerun's own results are its own
    assert summary["mini_batches_new"] == 30  # the counts of the plan the killed driver made
    ran = set(calls(tmp_path))
    assert len(ran) == 30  # the new mini-batches (some twice: those in flight or not yet committed) ...
    assert not ran & set(scored)  # ... and none of the 200 earlier ones


def test_a_rerun_killed_while_planning_resumes_from_the_earlier_runs_whole_plan(tmp_path, write_script):
    """More new mini-batches than the driver plans ahead of its workers (1,000): a driver killed early has
    written only part of its plan. The resume plans against the earlier run's whole plan, not that part
    (against which it would count nothing new), takes what the killed driver finished by fingerprint and
    runs no earlier mini-batch again."""
    write_script(SCORE)
    earlier = add_files(tmp_path / "data", 400, random.Random(6))
    assert run_step(config(mini_batch_size=2))["mini_batches_new"] == 200
    new = add_files(tmp_path / "data", 2200, random.Random(7))
    reset_calls(tmp_path)
    command = rerun_command(2)
    assert not killed_after(command, {**os.environ, "SLEEP": "0.2"}, tmp_path, 4)
    summary = resumed(command)
    rows = output_lines(summary)
    assert sorted(rows) == sorted(earlier + new)
    assert len(rows) == len(set(rows))
    assert summary["mini_batches_reused"] == 200
    assert (summary["mini_batches_new"], summary["inputs_new"]) == (1100, 2200)  # against the earlier run
    assert not set(calls(tmp_path)) & set(earlier)


class TestTables:
    def test_a_table_that_gains_a_file_runs_only_the_new_file(self, tmp_path, write_script):
        write_script("def run(frame):\n    return frame\n")
        folder = tmp_path / "sales"
        folder.mkdir()
        for day in range(3):
            pd.DataFrame({"day": [day] * 4, "amount": range(4)}).to_parquet(folder / f"day{day}.parquet")
        run_step(config(inputs=[TabularDataset(str(folder))]))
        pd.DataFrame({"day": [3] * 4, "amount": range(4)}).to_parquet(folder / "day3.parquet")
        summary = run_step(config(inputs=[TabularDataset(str(folder))]))
        assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (3, 1)
        assert summary["items_succeeded"] == 16
        assert len(output_lines(summary)) == 16

    def test_a_key_group_whose_rows_did_not_change_is_reused(self, tmp_path, write_script):
        write_script("def run(frame):\n    return frame\n")
        folder = tmp_path / "sales"
        folder.mkdir()
        pd.DataFrame({"store": [1, 1, 2], "amount": [1, 2, 3]}).to_parquet(folder / "a.parquet")
        pd.DataFrame({"store": [3, 3], "amount": [4, 5]}).to_parquet(folder / "b.parquet")
        fields = dict(inputs=[TabularDataset(str(folder))], partition_keys=["store"])
        assert run_step(config(**fields))["mini_batches_total"] == 3
        pd.DataFrame({"store": [3, 4], "amount": [6, 7]}).to_parquet(folder / "c.parquet")  # store 3 grows, 4 is new
        summary = run_step(config(**fields))
        assert (summary["mini_batches_reused"], summary["mini_batches_run"]) == (2, 2)  # stores 1, 2 reused
        assert len(output_lines(summary)) == 7


def test_a_failed_rerun_keeps_the_plan_for_the_next_one(tmp_path, scored, monkeypatch):
    """A rerun that fails (its two new mini-batches raise) stops at its first failure, its plan written
    only so far: the next rerun keeps the earlier mini-batches and cuts the new ones as the failed rerun
    did, and runs only those that failed."""
    new = add_files(tmp_path / "data", 20, random.Random(5))
    monkeypatch.setenv("FAIL", "1")  # the workers' environment, not the step's: the code key stays
    with pytest.raises(StepFailed) as failed:
        run_step(config(error_threshold=0, run_max_try=1))
    assert failed.value.summary["mini_batches_failed"] == 1
    monkeypatch.delenv("FAIL")
    summary = run_step(config(error_threshold=0, run_max_try=1))
    assert summary["mini_batches_reused"] == 200
    assert len(calls(tmp_path)) == 2
    assert sorted(output_lines(summary)) == sorted(scored + new)


def test_a_rerun_of_more_files_than_one_listing_run_finds_each_change(tmp_path, write_script):
    """25,000 files are listed in three runs of up to 10,000; the driver stats the first and a helper process
    the others while it plans: a file changed in the last run and one deleted in the second rerun exactly
    their two mini-batches, and the new files run as new ones."""
    write_script(SCORE)
    names = sorted(add_files(tmp_path / "data", 25_000, random.Random(8)))
    assert run_step(config(mini_batch_size=100))["mini_batches_new"] == 250
    reset_calls(tmp_path)
    changed, gone = names[24_321], names[12_345]
    (tmp_path / "data" / changed).write_text(changed + " v2\n")
    (tmp_path / "data" / gone).unlink()
    new = add_files(tmp_path / "data", 100, random.Random(9))
    summary = run_step(config(mini_batch_size=100))
    assert (summary["inputs_changed"], summary["inputs_deleted"], summary["inputs_new"]) == (1, 1, 100)
    assert summary["mini_batches_reused"] == 248
    assert len(calls(tmp_path)) == summary["mini_batches_run"] == summary["mini_batches_new"]
    rows = output_lines(summary)
    assert sorted(rows) == sorted({*names, *new} - {gone, changed} | {f"{changed} v2"})
