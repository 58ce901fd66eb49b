"""Every run ends: a shutdown() that never returns is cut off, a SIGTERM (as `timeout`, Kubernetes or Slurm
send it) cancels the run gracefully, a second one stops it at once, and no worker outlives the driver.

Through the CLI as a user runs it. No wall-clock asserts: a run that would not end fails by the
generous subprocess timeout instead.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

TAG = "PARALLEL_STEPS_TEST_RUN"  # in the environment of the CLI and so of every worker it starts
GONE_WITHIN_S = 10.0  # how long a process of a run may outlive the command

SHUTDOWN_HANGS = """
import os
import time

def run(mini_batch):
    time.sleep(0.2)  # long enough for both workers to get some
    return [os.path.basename(path) for path in mini_batch]

def shutdown():
    time.sleep(1000)
"""

# run() says it started (a file named after its input in STARTED), then takes SECONDS.
SLOW = """
import os
import sys
import time

STARTED, SECONDS = sys.argv[1], float(sys.argv[2])

def run(mini_batch):
    for path in mini_batch:
        open(os.path.join(STARTED, os.path.basename(path)), "w").close()
    time.sleep(SECONDS)
    return [os.path.basename(path) for path in mini_batch]
"""


def start(tmp_path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """`parallel-steps run ARGS --json` in the background, tagged so that its processes can be found."""
    command = [*prefix, sys.executable, "-m", "parallel_steps.cli", "run", "--json", *args]
    env = {**os.environ, TAG: str(tmp_path)}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def processes_of_run(tmp_path) -> list[psutil.Process]:
    """Processes anywhere on the machine started by a command of this test (they carry its tag)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(TAG) == str(tmp_path) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def assert_nothing_left(tmp_path) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := processes_of_run(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left behind: {[p.cmdline() for p in left]}"


def ready_workers(summary: dict) -> set[str]:
    events = Path(summary["run_dir"], "logs", "sys", "events.jsonl").read_text().splitlines()
    return {event["worker"] for event in map(json.loads, events) if event["type"] == "worker_started"}


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def slow_step(tmp_path, write_script, make_files, seconds: float, files: int = 6) -> list[str]:
    """Run options of a step of one-file mini-batches on 2 workers whose run() takes `seconds`."""
    (tmp_path / "started").mkdir()
    make_files(files)
    write_script(SLOW)
    return [
        "--entry-script", "score.py", "--input", "data", "--output", "out", "--mini-batch-size", "1",
        "--process-count-per-node", "2", "--run-invocation-timeout", "3600",
        "--", str(tmp_path / "started"), str(seconds),
    ]  # fmt: skip


def test_a_shutdown_that_never_returns_is_cut_off_and_the_run_succeeds(tmp_path, write_script, make_files):
    make_files(6)
    write_script(SHUTDOWN_HANGS)
    run = start(
        tmp_path,
        "--entry-script", "score.py", "--input", "data", "--output", "out", "--mini-batch-size", "1",
        "--process-count-per-node", "2", "--shutdown-timeout", "3",
    )  # fmt: skip
    stdout, stderr = run.communicate(timeout=120)  # far beyond the bound: shutdown() sleeps for 1000 s

    assert run.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["status"] == "Succeeded"
    # Every worker that finished init() runs shutdown() (one still starting at the end is just stopped).
    assert summary["shutdown_cut_off"]
    assert set(summary["shutdown_cut_off"]) == ready_workers(summary)
    rows = (tmp_path / "out" / "parallel_run_step.txt").read_text().splitlines()
    assert sorted(rows) == [f"f{i:04d}.txt" for i in range(6)]
    assert_nothing_left(tmp_path)


def test_timeout_over_a_hanging_step_leaves_no_process_behind(tmp_path, write_script, make_files):
    # `timeout` sends SIGTERM to the command when the time is up; run() would take an hour. The time is
    # made up once both workers hang: SIGALRM is what `timeout` waits for.
    step = slow_step(tmp_path, write_script, make_files, seconds=3600)
    run = start(tmp_path, *step, prefix=("timeout", "3600"))
    wait_for(lambda: len(os.listdir(tmp_path / "started")) == 2, "both workers in run()")
    run.send_signal(signal.SIGALRM)
    stdout, stderr = run.communicate(timeout=120)

    assert run.returncode == 124, stderr  # timeout's own status: the time was up
    assert json.loads(stdout)["status"] == "Canceled"
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("signals", [1, 2])
def test_sigterm_cancels_gracefully_and_a_second_one_stops_at_once(tmp_path, write_script, make_files, signals):
    # run() takes 4 s: less than the grace a first SIGTERM gives the mini-batches in flight.
    step = slow_step(tmp_path, write_script, make_files, seconds=4)
    run = start(tmp_path, "--run-dir", "run", *step)
    wait_for(lambda: len(os.listdir(tmp_path / "started")) == 2, "both workers in run()")
    run.send_signal(signal.SIGTERM)
    if signals == 2:  # once the first is handled: two signals pending at once are one
        log = tmp_path / "run" / "logs" / "sys" / "master_role.txt"
        wait_for(lambda: "may finish within" in log.read_text(), "the first SIGTERM handled")
        run.send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=120)

    assert run.returncode == 1, stderr
    summary = json.loads(stdout)
    assert summary["status"] == "Canceled"
    assert summary["status_reason"] == "canceled by the user (SIGTERM)"
    succeeded = summary["mini_batches_succeeded"]
    if signals == 1:  # the two in flight finish (and those already queued may); the rest never start
        assert 2 <= succeeded < 6
        assert len(os.listdir(tmp_path / "started")) < 6
    else:  # killed in run()
        assert succeeded == 0
    assert_nothing_left(tmp_path)


CLI = [sys.executable, "-m", "parallel_steps.cli"]


def test_a_worker_ends_after_shutdown_with_its_exit_handlers_run_and_its_output_flushed(tmp_path):
    """Workers end without the interpreter's teardown (a second with torch loaded), but as a normal exit would:
    the entry script's atexit handlers run, and what it printed or logged last is in its logs."""
    (tmp_path / "data").mkdir()
    for i in range(4):
        (tmp_path / "data" / f"f{i}.txt").write_text(f"{i}\n")
    (tmp_path / "score.py").write_text(
        "import atexit, logging, os\n"
        "from pathlib import Path\n"
        "from parallel_steps import EntryScript\n"
        "def init():\n"
        "    name = EntryScript().agent_name\n"
        "    atexit.register(lambda: Path('exited', name).write_text('atexit ran'))\n"
        "def run(mini_batch):\n"
        "    return mini_batch\n"
        "def shutdown():\n"
        "    print('last words', end='')  # no newline, not flushed\n"
        "    EntryScript().logger.info('logged at shutdown')\n"
    )
    (tmp_path / "exited").mkdir()
    done = subprocess.run(
        [*CLI, "run", "--entry-script", "score.py", "--input", "data", "--process-count-per-node", "1", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "exited" / "process000").read_text() == "atexit ran"
    logs = Path(json.loads(done.stdout)["run_dir"], "logs", "user")
    assert (logs / "stdout" / "node0" / "process000.stdout.txt").read_text().endswith("last words")
    assert "logged at shutdown" in (logs / "entry_script_log" / "node0" / "process000.log.txt").read_text()
