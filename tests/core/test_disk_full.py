"""A disk that fills mid-run (store/space.py): the run directory, or the output folder, on a small tmpfs
mounted by the test. The run ends Failed with one line naming the path and the lack of space (no
traceback), the ledger stays whole, nothing partial is left where the output goes, and once space is
made a rerun in the same run directory resumes with every row once.

Mounting needs root (CAP_SYS_ADMIN); elsewhere these tests are skipped, saying why.
"""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_steps.store.ledger_queries import SUCCEEDED

from .test_shutdown import TAG, assert_nothing_left

pytestmark = pytest.mark.slow

FILES = 300

# 20 kB per row: 300 rows (6 MB) do not fit in 3 MB.
BIG_ROWS = """
import os


def run(mini_batch):
    return [os.path.basename(path) + " " + "z" * 20_000 for path in mini_batch]
"""


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(name)`: a 3 MB tmpfs at tmp_path/name; `.grow(path)` makes room on it. Unmounted at the end."""
    mounted: list[Path] = []

    class Disk:
        def __call__(self, name: str) -> Path:
            path = tmp_path / name
            path.mkdir()
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(path)], capture_output=True)
            if done.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
            mounted.append(path)
            return path

        def grow(self, path: Path) -> None:
            subprocess.run(["mount", "-o", "remount,size=64m", str(path)], check=True)

    yield Disk()
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def run_cli(tmp_path: Path, run_dir: Path, output: Path) -> subprocess.CompletedProcess:
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        for i in range(FILES):
            (data / f"f{i:04d}.txt").write_text(f"{i}\n")
        (tmp_path / "big.py").write_text(BIG_ROWS)
    command = [
        sys.executable, "-m", "parallel_steps.cli", "run", "--json", "--entry-script", "big.py", "--input", "data",
        "--mini-batch-size", "1", "--process-count-per-node", "2", "--run-dir", str(run_dir), "--output", str(output),
    ]  # fmt: skip
    env = {**os.environ, TAG: str(tmp_path)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)


def assert_failed_for_lack_of_space(done: subprocess.CompletedProcess, where: Path) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    reason = json.loads(done.stdout)["status_reason"]
    assert reason.startswith(str(where)), reason
    assert "no space left on the device" in reason


def assert_every_row_once(output_file: Path) -> None:
    rows = [line.split(" ")[0] for line in output_file.read_text().splitlines()]
    assert sorted(rows) == [f"f{i:04d}.txt" for i in range(FILES)]


def test_a_full_run_directory_fails_the_run_in_one_line_and_a_rerun_resumes(tmp_path, small_disk):
    disk = small_disk("disk")
    run_dir, output = disk / "run", tmp_path / "out"
    done = run_cli(tmp_path, run_dir, output)

    assert_failed_for_lack_of_space(done, disk)
    assert not (output / "parallel_run_step.txt").exists()
    ledger = sqlite3.connect(run_dir / "ledger.sqlite")
    assert ledger.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    committed = ledger.execute(f"SELECT count(*) FROM mini_batches WHERE state = {SUCCEEDED}").fetchone()[0]
    ledger.close()
    assert 0 < committed < FILES  # it filled mid-run
    assert_nothing_left(tmp_path)

    small_disk.grow(disk)
    rerun = run_cli(tmp_path, run_dir, output)
    assert rerun.returncode == 0, rerun.stderr
    assert_every_row_once(output / "parallel_run_step.txt")
    assert_nothing_left(tmp_path)


def test_a_full_output_folder_fails_the_run_in_one_line_and_a_rerun_delivers(tmp_path, small_disk):
    output = small_disk("out")
    run_dir = tmp_path / "run"
    done = run_cli(tmp_path, run_dir, output)

    assert_failed_for_lack_of_space(done, output)
    assert os.listdir(output) == []  # no partial output file
    assert json.loads(done.stdout)["mini_batches_succeeded"] == FILES  # every result stands in the ledger
    assert_nothing_left(tmp_path)

    small_disk.grow(output)
    rerun = run_cli(tmp_path, run_dir, output)
    assert rerun.returncode == 0, rerun.stderr
    assert_every_row_once(output / "parallel_run_step.txt")
