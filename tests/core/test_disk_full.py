"""A disk that fills mid-run (store/space.py): the run directory, or the output folder, on a small tmpfs
mounted by the test. The run ends Failed with one line naming the path and the lack of space (no
traceback), the ledger stays whole, nothing partial is left where the output goes, and once space is
made a rerun in the same run directory resumes with every row once.

The first two tests let the rows fill the disk; the others fill it in one phase of the run (a spool
append, the ledger's commit, the assembly, the report: the one bookkeeping phase, which does not fail the
run) with a filler file the entry script writes at the moment that phase comes next (one worker, so that
nothing else writes then).

Mounting needs root (CAP_SYS_ADMIN); elsewhere these tests are skipped, saying why.
"""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_steps.store.ledger.queries import SUCCEEDED

from .test_shutdown import TAG, assert_nothing_left

pytestmark = pytest.mark.slow

FILES = 300

# 20 kB per row: 300 rows (6 MB) do not fit in 3 MB, nor do their spools (compressed: random base64, 15 kB).
BIG_ROWS = """
import base64
import os


def run(mini_batch):
    return [os.path.basename(path) + " " + base64.b64encode(os.urandom(15_000)).decode() for path in mini_batch]
"""


# FILL names the phase whose write is the first that does not fit; DISK is the tmpfs the filler goes on.
FILLS = """
import os
import time

FILL, DISK, ROW = os.environ.get("FILL", ""), os.environ.get("DISK", ""), int(os.environ.get("ROW_BYTES", "1000"))


def fill(room):
    # The disk full but for `room` bytes: a filler file written until nothing fits, then cut by `room`.
    with open(os.path.join(DISK, "filler"), "wb", buffering=0) as filler:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    filler.write(bytes(chunk))
            except OSError:
                pass
        filler.truncate(max(0, filler.tell() - room))


def run(mini_batch):
    names = [os.path.basename(path) for path in mini_batch]
    if FILL == "spool" and names == ["f0000.txt"]:  # its rows are the first write after it
        fill(room=0)
    if FILL == "commit":
        time.sleep(0.01)  # not quick: each result is flushed and sent on its own, the spool left empty
        if names == ["LAST"]:  # the last result, with no rows: the ledger's commit comes next
            fill(room=0)
            return []
    return [name + " " + "z" * ROW for name in names]


def shutdown():  # after every mini-batch, before the output is assembled and the report written
    if FILL in ("assembly", "report"):
        fill(room=64 << 10)  # the ledger's and the logs' last lines fit, not the output or the report
""".replace("LAST", f"f{FILES - 1:04d}.txt")


def mount(arguments: list[str], path: Path, what: str) -> Path:
    """`mount ARGUMENTS PATH`; the test is skipped, saying why, where it cannot (mounting needs root)."""
    done = subprocess.run(["mount", *arguments, str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount {what} here (needs root): {done.stderr.decode().strip()}")
    return path


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(name)`: a 3 MB tmpfs at tmp_path/name; `.grow(path)` makes room on it. Unmounted at the end."""
    mounted: list[Path] = []

    class Disk:
        def __call__(self, name: str) -> Path:
            path = tmp_path / name
            path.mkdir()
            mounted.append(mount(["-t", "tmpfs", "-o", "size=3m", "tmpfs"], path, "a tmpfs"))
            return path

        def grow(self, path: Path) -> None:
            subprocess.run(["mount", "-o", "remount,size=64m", str(path)], check=True)

    yield Disk()
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def write_inputs(tmp_path: Path, script: str, text: str) -> None:
    """The FILES inputs and the entry script, written once per test."""
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        for i in range(FILES):
            (data / f"f{i:04d}.txt").write_text(f"{i}\n")
        (tmp_path / script).write_text(text)


def run_cli(tmp_path: Path, run_dir: Path, output: Path) -> subprocess.CompletedProcess:
    write_inputs(tmp_path, "big.py", BIG_ROWS)
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


def test_a_full_run_root_fails_the_run_in_one_line_and_a_rerun_resumes(tmp_path, small_disk):
    """The run root (PARALLEL_STEPS_HOME) itself on the small disk: the run directory fills, and then the run
    index cannot take the run's end either. One line for the run, one for the index, no traceback; the rerun
    in the run directory the line names resumes, and the index has its end."""
    root = small_disk("root")
    write_inputs(tmp_path, "big.py", BIG_ROWS)
    command = [
        sys.executable, "-m", "parallel_steps.cli", "run", "--json", "--entry-script", "big.py", "--input", "data",
        "--mini-batch-size", "1", "--process-count-per-node", "2", "--output", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, TAG: str(tmp_path), "PARALLEL_STEPS_HOME": str(root)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)

    run_dir = Path(json.loads(done.stdout)["run_dir"])
    assert run_dir.parent == root
    assert_failed_for_lack_of_space(done, run_dir)
    [index_line] = [line for line in done.stderr.splitlines() if "index.sqlite" in line]
    assert index_line.startswith(f"{root / 'index.sqlite'}: no space left on the device")
    committed = ledger_whole(run_dir)
    assert 0 < committed < FILES  # it filled mid-run
    assert_nothing_left(tmp_path)
    assert runs_status(run_dir, env) == "Failed"  # the index's row read mended from run.json, on the full disk too

    small_disk.grow(root)
    rerun = subprocess.run(
        [*command, "--run-dir", str(run_dir)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
    )
    assert rerun.returncode == 0, rerun.stderr
    assert_every_row_once(tmp_path / "out" / "parallel_run_step.txt")
    assert runs_status(run_dir, env) == "Succeeded"


def runs_status(run_dir: Path, env: dict[str, str]) -> str:
    """The run's status as `parallel-steps runs` lists it."""
    listed = subprocess.run(
        [sys.executable, "-m", "parallel_steps.cli", "runs", "--json"], capture_output=True, text=True, env=env
    )
    assert listed.returncode == 0, listed.stderr
    [status] = [run["status"] for run in json.loads(listed.stdout) if run["run_id"] == run_dir.name]
    return str(status)


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


@pytest.fixture
def read_only(tmp_path):
    """`read_only(name)`: tmp_path/name, bind-mounted read-only (EROFS to every write); `.allow(path)` makes it
    writable again. Unmounted at the end."""
    mounted: list[Path] = []

    class Mount:
        def __call__(self, name: str) -> Path:
            path = tmp_path / name
            path.mkdir()
            mounted.append(mount(["--bind", str(path)], path, "a folder on itself"))
            subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
            return path

        def allow(self, path: Path) -> None:
            subprocess.run(["mount", "-o", "remount,bind,rw", str(path)], check=True)

    yield Mount()
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_read_only_output_folder_fails_the_run_in_one_line_and_a_rerun_delivers(tmp_path, read_only):
    output = read_only("out")
    run_dir = tmp_path / "run"
    done = run_cli(tmp_path, run_dir, output)

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    reason = json.loads(done.stdout)["status_reason"]
    assert reason.startswith(f"{output}/"), reason
    assert ": a read-only file system (make it writable, or choose another folder, then rerun" in reason
    assert os.listdir(output) == []
    assert json.loads(done.stdout)["mini_batches_succeeded"] == FILES  # every result stands in the ledger
    assert_nothing_left(tmp_path)

    read_only.allow(output)
    rerun = run_cli(tmp_path, run_dir, output)
    assert rerun.returncode == 0, rerun.stderr
    assert_every_row_once(output / "parallel_run_step.txt")


def run_phase(tmp_path: Path, disk: Path, phase: str, *options: str, row_bytes: int = 1000):
    """The step on one worker, FILL=`phase` filling `disk`; the run directory is `disk`/run."""
    write_inputs(tmp_path, "fills.py", FILLS)
    command = [
        sys.executable, "-m", "parallel_steps.cli", "run", "--json", "--entry-script", "fills.py", "--input", "data",
        "--mini-batch-size", "1", "--process-count-per-node", "1", "--run-dir", str(disk / "run"), *options,
    ]  # fmt: skip
    env = {**os.environ, TAG: str(tmp_path), "FILL": phase, "DISK": str(disk), "ROW_BYTES": str(row_bytes)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)


def ledger_whole(run_dir: Path) -> int:
    """The ledger passes SQLite's integrity check; the mini-batches it holds as succeeded."""
    ledger = sqlite3.connect(run_dir / "ledger.sqlite")
    try:
        assert ledger.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return int(ledger.execute(f"SELECT count(*) FROM mini_batches WHERE state = {SUCCEEDED}").fetchone()[0])
    finally:
        ledger.close()


def free_and_rerun(tmp_path: Path, disk: Path, *options: str) -> Path:
    """Remove the filler, rerun without filling: it succeeds; its output file."""
    (disk / "filler").unlink()
    rerun = run_phase(tmp_path, disk, "", *options)
    assert rerun.returncode == 0, rerun.stderr
    assert_nothing_left(tmp_path)
    return Path(json.loads(rerun.stdout)["output_file"])


@pytest.mark.parametrize("row_bytes", [100, 20_000], ids=["buffered", "written-at-once"])
def test_a_disk_that_fills_during_a_spool_append_names_the_spool(tmp_path, small_disk, row_bytes):
    # 100 bytes: the row waits in the spool's buffer and the flush before its result is sent fails (that result
    # must not be reported as written); 20 kB: the append itself fails.
    disk = small_disk("disk")
    done = run_phase(tmp_path, disk, "spool", row_bytes=row_bytes)

    assert_failed_for_lack_of_space(done, disk / "run" / "parts")
    assert ledger_whole(disk / "run") == 0
    assert not (disk / "run" / "output" / "parallel_run_step.txt").exists()
    assert_nothing_left(tmp_path)
    assert_every_row_once(free_and_rerun(tmp_path, disk))


def test_a_disk_that_fills_before_the_ledgers_commit_fails_the_run_and_keeps_what_was_committed(tmp_path, small_disk):
    disk = small_disk("disk")
    done = run_phase(tmp_path, disk, "commit")

    assert_failed_for_lack_of_space(done, disk / "run")
    assert 0 < ledger_whole(disk / "run") < FILES  # what was committed before stands; the last result did not fit
    assert not (disk / "run" / "output" / "parallel_run_step.txt").exists()
    assert_nothing_left(tmp_path)
    assert_every_row_once(free_and_rerun(tmp_path, disk))


def test_a_disk_that_fills_during_the_assembly_leaves_no_partial_output(tmp_path, small_disk):
    disk = small_disk("disk")
    output = disk / "run" / "output"  # the default output folder: in the run directory
    done = run_phase(tmp_path, disk, "assembly")

    assert_failed_for_lack_of_space(done, output / "parallel_run_step.txt")
    assert os.listdir(output) == []
    assert json.loads(done.stdout)["mini_batches_succeeded"] == ledger_whole(disk / "run") == FILES
    assert_nothing_left(tmp_path)
    assert_every_row_once(free_and_rerun(tmp_path, disk))


def test_a_disk_that_fills_during_the_report_ends_the_run_as_it_would_have_without_its_report(tmp_path, small_disk):
    # The output goes elsewhere and is delivered before the report; the report does not fit in the run directory.
    # The report is bookkeeping: the run succeeds, and says in one line that its report was not written.
    disk = small_disk("disk")
    output = tmp_path / "out"
    done = run_phase(tmp_path, disk, "report", "--output", str(output))

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    report = disk / "run" / "logs" / "report.html"
    [line] = [line for line in done.stderr.splitlines() if "report" in line]
    assert line.startswith(f"{report}: no space left on the device; the report was not written"), line
    assert json.loads(done.stdout)["report"] is None
    assert [name for name in os.listdir(disk / "run" / "logs") if "report" in name] == []  # no partial page
    assert ledger_whole(disk / "run") == FILES
    assert_every_row_once(output / "parallel_run_step.txt")
    assert_nothing_left(tmp_path)
    assert_every_row_once(free_and_rerun(tmp_path, disk, "--output", str(output)))
    assert report.exists()
