"""Nothing a run makes stays in $TMPDIR (issue 47): each kind of run is started with TMPDIR an empty folder of its
own, and the folder is empty once the run is over, whether it succeeded, failed, was canceled, ran detached, or
ran on a local Ray started for it (Ray's session folder goes with it). A side input is given in each, so that
the runs copy something where they copy (Ray copies local side inputs to every node)."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import CLI

SCORE = """
import os, time
from pathlib import Path

def run(mini_batch):
    if os.environ.get("FAIL"):
        raise ValueError("failing on purpose")
    if os.environ.get("SLOW"):
        Path(os.environ["STARTED"]).touch()
        time.sleep(60)
    return mini_batch
"""


@pytest.fixture
def step(tmp_path, make_files, write_script):
    """The step's options, and an environment whose TMPDIR is an empty folder."""
    make_files(4)
    write_script(SCORE)
    (tmp_path / "labels.txt").write_text("a\nb\n")
    # Short: a local Ray puts its sockets there, and their paths may not pass 107 bytes.
    temporary = Path(tempfile.mkdtemp(prefix="ps-", dir="/tmp"))
    options = ["--entry-script", "score.py", "--input", "data", "--set", "mini_batch_size=1"]
    options += ["--set", f"side_inputs={{labels: {tmp_path / 'labels.txt'}}}", "--set", "allow_reuse=false"]
    environment = {**os.environ, "TMPDIR": str(temporary), "PARALLEL_STEPS_HOME": str(tmp_path / "runs")}
    yield options, environment, temporary
    shutil.rmtree(temporary, ignore_errors=True)


def left(temporary: Path) -> list[str]:
    return sorted(str(path.relative_to(temporary)) for path in temporary.rglob("*"))


def cli(options, environment, cwd, *extra, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "run", *options, *extra],
        cwd=cwd,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("kind", "extra", "env", "code"),
    [
        ("succeeded", (), {}, 0),
        ("failed", ("--set", "run_max_try=1", "--set", "error_threshold=0"), {"FAIL": "1"}, 1),
        ("on a local Ray", ("--set", "backend=ray", "--set", "process_count_per_node=1"), {}, 0),
    ],
)
def test_a_run_leaves_nothing_in_the_temporary_folder(step, tmp_path, kind, extra, env, code):
    options, environment, temporary = step
    result = cli(options, environment, tmp_path, *extra, **env)
    assert result.returncode == code, result.stderr
    assert left(temporary) == []


def test_a_detached_run_leaves_nothing_in_the_temporary_folder(step, tmp_path):
    options, environment, temporary = step
    started = cli(options, environment, tmp_path, "--detach")
    assert started.returncode == 0, started.stderr
    run_id, _ = started.stdout.split()
    waited = subprocess.run(
        [*CLI, "wait", run_id, "--timeout", "120"], cwd=tmp_path, env=environment, capture_output=True, timeout=180
    )
    assert waited.returncode == 0, waited.stderr
    deadline = time.monotonic() + 30  # the detached driver ends a moment after its run
    while left(temporary) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left(temporary) == []


def test_a_canceled_run_leaves_nothing_in_the_temporary_folder(step, tmp_path):
    options, environment, temporary = step
    marker = tmp_path / "started"
    run = subprocess.Popen(
        [*CLI, "run", *options],
        cwd=tmp_path,
        env={**environment, "SLOW": "1", "STARTED": str(marker)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) != 0
    assert left(temporary) == []
