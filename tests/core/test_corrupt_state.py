"""A run directory whose state is damaged (a truncated or overwritten ledger.sqlite, a truncated
run.json) or written by a newer version: the CLI says in one line what is wrong and how to go on,
never a traceback, and never wipes what it cannot read."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_steps.store.ledger.queries import SUCCEEDED

SCRIPT = """
import os


def run(mini_batch):
    return [os.path.basename(path) for path in mini_batch]
"""


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "parallel_steps.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)


@pytest.fixture
def finished_run(tmp_path, make_files) -> list[str]:
    """The options of a step whose run in `run/` succeeded."""
    make_files(4)
    (tmp_path / "score.py").write_text(SCRIPT)
    options = ["run", "--entry-script", "score.py", "--input", "data", "--output", "out", "--run-dir", "run"]
    done = cli(tmp_path, *options)
    assert done.returncode == 0, done.stderr
    return options


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_truncated_ledger_is_named_with_how_to_go_on(tmp_path, finished_run):
    ledger = tmp_path / "run" / "ledger.sqlite"
    os.truncate(ledger, ledger.stat().st_size // 2)

    line = one_line(cli(tmp_path, *finished_run))
    assert line.startswith(f"parallel-steps: {ledger}: is damaged (")
    assert "rerun the step in a fresh run directory" in line
    fresh = cli(tmp_path, *finished_run[:-1], "fresh")  # what the line says works
    assert fresh.returncode == 0, fresh.stderr


def test_a_ledger_overwritten_with_garbage_is_named(tmp_path, finished_run):
    ledger = tmp_path / "run" / "ledger.sqlite"
    ledger.write_bytes(os.urandom(4096))

    assert one_line(cli(tmp_path, *finished_run)).startswith(f"parallel-steps: {ledger}: is damaged (")


def test_a_run_directory_of_a_newer_version_is_refused_not_wiped(tmp_path, finished_run):
    ledger = tmp_path / "run" / "ledger.sqlite"
    db = sqlite3.connect(ledger)
    succeeded = db.execute(f"SELECT count(*) FROM mini_batches WHERE state = {SUCCEEDED}").fetchone()[0]
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()

    line = one_line(cli(tmp_path, *finished_run))
    assert "was written by a newer parallel-steps (ledger layout 99" in line
    db = sqlite3.connect(ledger)
    assert db.execute(f"SELECT count(*) FROM mini_batches WHERE state = {SUCCEEDED}").fetchone()[0] == succeeded > 0
    db.close()


def test_a_truncated_run_json_is_read_from_the_index_or_named(tmp_path, finished_run):
    summary = tmp_path / "run" / "run.json"
    summary.write_text(summary.read_text()[:40])

    status = cli(tmp_path, "status", "run", "--json")  # the run's end is in the index too
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "Succeeded"

    lone = tmp_path / "lone"  # a run directory the index does not know
    lone.mkdir()
    (lone / "run.json").write_text('{"status": "Runn')
    line = one_line(cli(tmp_path, "status", "lone"))
    assert line.startswith(f"parallel-steps: {lone / 'run.json'}: is damaged")
    assert "rerun the step in the same run directory" in line

    rerun = cli(tmp_path, *finished_run)  # what the line says works: the run's own directory is rewritten
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(summary.read_text())["status"] == "Succeeded"
