"""The termination contract (driver/termination.py): SIGTERM to `parallel-steps run`, as Kubernetes or
Airflow send it, in any phase of a run ends the run within `termination_grace`; nothing of the run is
left; what finished stays committed and a rerun in the same run directory gives every row once.

Each test makes one phase long with the entry script (PHASE in the environment the workers inherit,
so that the rerun, without it, runs the same code key to its end) or with the inputs, sends one
SIGTERM while the run is in that phase, and checks the bound the contract promises (the grace plus
5 s, the issue's acceptance) rather than a speed.
"""

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from parallel_steps.control import URGENT_EXIT_S, Cancel
from parallel_steps.driver import termination

from .test_shutdown import TAG, assert_nothing_left, wait_for

pytestmark = pytest.mark.slow

GRACE_S = 6.0
BOUND_S = GRACE_S + 5.0

PHASES = """
import os
import time

from azureml_user.parallel_run import EntryScript

PHASE, MARKS = os.environ.get("PHASE", ""), os.environ["MARKS"]


def mark(name):
    open(os.path.join(MARKS, name), "w").close()


def init():
    if PHASE == "init":
        mark("init")
        time.sleep(3600)


def run(mini_batch):
    names = [os.path.basename(path) for path in mini_batch]
    if PHASE == "running":
        mark("running")
        time.sleep(3600)
    if PHASE == "uploading":  # files the script writes itself: each is uploaded with the output
        for name in names:
            with open(os.path.join(EntryScript().output_dir, name + ".extra"), "w") as file:
                file.write("x" * 200_000)
    return names


def shutdown():
    if PHASE == "shutdown":
        mark("shutdown")
        time.sleep(3600)
"""


def cli(tmp_path: Path, options: list[str], phase: str) -> subprocess.Popen:
    env = {**os.environ, TAG: str(tmp_path), "MARKS": str(tmp_path / "marks"), "PHASE": phase}
    command = [sys.executable, "-m", "parallel_steps.cli", "run", "--json", *options]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def step(tmp_path: Path, files: int, output: str = "out", *extra: str, grace: float = GRACE_S) -> list[str]:
    (tmp_path / "marks").mkdir(exist_ok=True)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for i in range(files):
        (data / f"f{i:05d}.txt").write_text(f"{i}\n")
    (tmp_path / "phases.py").write_text(PHASES)
    return [
        "--entry-script", "phases.py", "--input", "data", "--output", output, "--run-dir", "run",
        "--mini-batch-size", "1", "--process-count-per-node", "2", "--run-invocation-timeout", "600",
        "--termination-grace", str(grace), *extra,
    ]  # fmt: skip


def terminate(run: subprocess.Popen) -> tuple[float, str]:
    """One SIGTERM; how long the command took to end after it, and its stderr."""
    sent = time.monotonic()
    run.send_signal(signal.SIGTERM)
    try:
        _, stderr = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        raise
    return time.monotonic() - sent, stderr


def rerun_gives_every_row_once(tmp_path: Path, options: list[str], files: int) -> None:
    rerun = cli(tmp_path, options, phase="")
    stdout, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["status"] == "Succeeded"
    output = Path(summary["output_file"].removeprefix("file://"))
    rows = pd.read_parquet(output).iloc[:, 0].tolist() if output.suffix == ".parquet" else output.read_text().split()
    assert sorted(rows) == [f"f{i:05d}.txt" for i in range(files)]
    assert_nothing_left(tmp_path)


def ended_canceled(tmp_path: Path) -> dict:
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert summary["status"] == "Canceled", summary["status_reason"]
    assert summary["status_reason"] == "canceled by the user (SIGTERM)"
    return summary


def marked(tmp_path: Path, name: str):
    return lambda: (tmp_path / "marks" / name).exists()


@pytest.mark.parametrize("phase", ["init", "running", "shutdown"])
def test_sigterm_while_the_entry_script_hangs_ends_the_run_within_the_grace(tmp_path, phase):
    # init() or run() or shutdown() sleeps for an hour; run_invocation_timeout (and so shutdown_timeout) is 600 s.
    options = step(tmp_path, 6)
    run = cli(tmp_path, options, phase)
    wait_for(marked(tmp_path, phase), f"{phase} reached")
    took, stderr = terminate(run)

    assert took < BOUND_S, stderr
    assert run.returncode == 1, stderr
    summary = ended_canceled(tmp_path)
    if phase == "shutdown":  # every mini-batch had finished: their results stand
        assert summary["mini_batches_succeeded"] == 6
    assert_nothing_left(tmp_path)
    rerun_gives_every_row_once(tmp_path, options, 6)


def test_sigterm_while_planning_a_large_input_ends_the_run_within_the_grace(tmp_path):
    # A rerun plans the whole input before anything runs: 20,000 one-file mini-batches take it a few seconds.
    files = 20_000
    options = step(tmp_path, files)
    first = cli(tmp_path, options, phase="init")  # a first driver plans, then its workers hang in init()
    wait_for(marked(tmp_path, "init"), "the first run's workers in init()")
    terminate(first)
    lock = tmp_path / "run" / "driver.lock"
    run = cli(tmp_path, options, phase="init")
    wait_for(lambda: f"pid {run.pid} " in lock.read_text(), "the rerun's driver holding its run")
    took, stderr = terminate(run)

    assert took < BOUND_S, stderr
    assert not (tmp_path / "run" / "logs" / "sys" / "master_role.txt").read_text().count("(resumed)")
    ended_canceled(tmp_path)
    assert_nothing_left(tmp_path)
    rerun_gives_every_row_once(tmp_path, options, files)


def test_sigterm_while_assembling_stops_with_no_partial_output(tmp_path):
    # 3000 slices to Parquet: each is read and written as a table, a few seconds in all.
    files = 3000
    options = step(tmp_path, files, "out", "--append-row-file-name", "rows.parquet")
    run = cli(tmp_path, options, phase="assembling")
    out = tmp_path / "out"
    wait_for(lambda: any(name.endswith(".tmp") for name in os.listdir(out)) if out.exists() else False, "assembling")
    took, stderr = terminate(run)

    assert took < BOUND_S, stderr
    ended_canceled(tmp_path)
    assert os.listdir(out) == []  # neither the output file nor a partial one
    assert_nothing_left(tmp_path)
    rerun_gives_every_row_once(tmp_path, options, files)


def test_sigterm_while_uploading_stops_between_two_files(tmp_path):
    files = 1500
    target = tmp_path / "target"
    options = step(tmp_path, files, f"file://{target}")
    run = cli(tmp_path, options, phase="uploading")
    wait_for(lambda: target.exists() and len(os.listdir(target)) > 20, "uploading")
    took, stderr = terminate(run)

    assert took < BOUND_S, stderr
    ended_canceled(tmp_path)
    assert not (target / "parallel_run_step.txt").exists()  # the output file goes last: the upload was not whole
    assert_nothing_left(tmp_path)
    rerun_gives_every_row_once(tmp_path, options, files)


def test_sigterm_while_the_report_is_written_ends_the_run_within_the_grace(tmp_path):
    # The report reads the monitor's samples under logs/perf/: one of them is a FIFO nobody writes to, a read
    # that never returns (a hung network file system). The output is delivered before the report.
    # A grace of 16 s: the summary is written in the last eighth of it (2 s), after the report is given up.
    grace = 16.0
    options = step(tmp_path, 6, grace=grace)
    stuck = tmp_path / "run" / "logs" / "perf" / "stuck" / "node_resource_usage.csv"
    stuck.parent.mkdir(parents=True)
    os.mkfifo(stuck)
    run = cli(tmp_path, options, phase="")
    writer = wait_for_reader(stuck)
    try:
        took, stderr = terminate(run)
    finally:
        os.close(writer)

    assert took < grace + 5, stderr
    log = (tmp_path / "run" / "logs" / "sys" / "master_role.txt").read_text()
    assert "the report: not written, the run was canceled" in log
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run.returncode, summary["status"], summary["report"]) == (0, "Succeeded", None)  # the output was whole
    assert_nothing_left(tmp_path)
    stuck.unlink()
    rerun_gives_every_row_once(tmp_path, options, 6)


def wait_for_reader(fifo: Path) -> int:
    """The FIFO's write end, opened once someone has it open for reading (until then: ENXIO)."""
    opened: list[int] = []

    def reader_there() -> bool:
        try:
            opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        return bool(opened)

    wait_for(reader_there, f"a reader of {fifo}")
    return opened[0]


def test_a_second_sigterm_while_shutdown_hangs_stops_at_once(tmp_path):
    options = step(tmp_path, 6)
    run = cli(tmp_path, options, "shutdown")
    wait_for(marked(tmp_path, "shutdown"), "shutdown() reached")
    run.send_signal(signal.SIGTERM)
    log = tmp_path / "run" / "logs" / "sys" / "master_role.txt"
    seen = "canceled by the user (SIGTERM) while the workers stop"  # logged as the driver sees the cancel
    wait_for(lambda: seen in log.read_text(), "the first SIGTERM seen")
    took, stderr = terminate(run)

    assert took < URGENT_EXIT_S + 5, stderr
    assert "SIGTERM again: stopping every worker now" in stderr
    ended_canceled(tmp_path)
    assert_nothing_left(tmp_path)
    rerun_gives_every_row_once(tmp_path, options, 6)


# The timings, against a fake pool -------------------------------------------------------------------


class FakePool:
    def __init__(self) -> None:
        self.killed = threading.Event()

    def kill_workers(self) -> None:
        self.killed.set()


def test_the_guard_kills_the_workers_once_the_shutdown_share_is_over():
    cancel, pool = Cancel(), FakePool()
    guarded = termination.Termination(cancel, grace=0.0)
    with guarded.guard(pool, logging.getLogger("test")):  # type: ignore[arg-type]
        cancel.cancel()
        assert pool.killed.wait(60)  # what close() waits for: the workers' end


def test_the_guard_leaves_workers_alone_without_a_cancel():
    pool = FakePool()
    with termination.Termination(threading.Event(), grace=0.0).guard(pool, logging.getLogger("test")):  # type: ignore[arg-type]
        pass
    assert not pool.killed.is_set()


def test_the_report_is_not_waited_for_past_the_grace_and_otherwise_is():
    release = threading.Event()
    cancel = Cancel()
    bounds = termination.Termination(cancel, grace=0.0)
    assert bounds.bounded(lambda: "written", "the report", logging.getLogger("test")) == "written"
    cancel.cancel()
    assert bounds.bounded(lambda: release.wait(60), "the report", logging.getLogger("test")) is None
    release.set()


def test_shutdown_gets_what_is_left_of_its_share_after_a_cancel():
    cancel = Cancel()
    bounds = termination.Termination(cancel, grace=20.0)
    assert bounds.shutdown_grace(600) == 600
    cancel.cancel()
    assert 0 < bounds.shutdown_grace(600) <= 15
    assert bounds.shutdown_grace(1) == 1
    cancel.cancel()  # a second cancel: none
    assert bounds.shutdown_grace(600) == 0
