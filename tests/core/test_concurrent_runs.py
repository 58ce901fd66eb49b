"""Many runs at once under one run root (as a scheduler starts them): 16 runs of different steps and 2 of
the same step with different parameters, while `clean` runs. Each succeeds with its own rows, `runs`
lists each once with its status, `clean` never removes a running run, and "database is locked" never
reaches the user. Heavy (18 drivers and their workers): run it under the shared lock."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_shutdown import TAG, assert_nothing_left

pytestmark = pytest.mark.slow

SCRIPT = """
import os
import sys
import time

def run(mini_batch):
    time.sleep(0.3)
    return [sys.argv[1] + " " + os.path.basename(path) for path in mini_batch]
"""


def cli(tmp_path: Path, command: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "parallel_steps.cli", command, "--run-root", str(tmp_path / "runs"), *args]


def test_sixteen_steps_and_one_step_twice_at_once_under_one_run_root(tmp_path, make_files):
    make_files(6)
    (tmp_path / "score.py").write_text(SCRIPT)
    env = {**os.environ, TAG: str(tmp_path)}
    runs = {f"step-{i:02d}": (f"step-{i:02d}", f"p{i}") for i in range(16)}  # each its own (else one reuses another)
    runs |= {"twice-a": ("twice", "a"), "twice-b": ("twice", "b")}  # one step, two parameters
    started = {}
    for key, (name, param) in runs.items():
        options = ["--name", name, "--entry-script", "score.py", "--input", "data", "--mini-batch-size", "1"]
        options += ["--process-count-per-node", "1", "--output", f"out/{key}", "--", param]
        started[key] = subprocess.Popen(
            cli(tmp_path, "run", "--json", *options), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=tmp_path,
        )  # fmt: skip
    cleaned, removed = [], set()
    while any(process.poll() is None for process in started.values()):
        done = subprocess.run(cli(tmp_path, "clean", "--keep", "0"), capture_output=True, text=True, env=env)
        cleaned.append(done)
        removed |= set(done.stdout.split()[3:])  # "removed N run(s)" then the run ids
        time.sleep(1.0)
    results = {key: (process.returncode, *process.communicate()) for key, process in started.items()}

    for key, (code, stdout, stderr) in results.items():
        assert code == 0, f"{key}: {stderr}"
        assert "database is locked" not in stderr
        summary = json.loads(stdout)
        assert summary["status"] == "Succeeded"
        param = runs[key][1]
        rows = (tmp_path / "out" / key / "parallel_run_step.txt").read_text().splitlines()
        assert sorted(rows) == [f"{param} f{i:04d}.txt" for i in range(6)]
    for done in cleaned:
        assert done.returncode == 0, done.stderr
        assert "database is locked" not in done.stderr
    run_ids = {json.loads(stdout)["run_id"] for _, stdout, _ in results.values()}
    assert len(run_ids) == 18
    assert removed <= run_ids
    listed = json.loads(subprocess.run(cli(tmp_path, "runs", "--json"), capture_output=True, text=True).stdout)
    ids = [record["run_id"] for record in listed]
    assert sorted(ids) == sorted(run_ids - removed)  # each once; none removed while it ran (it would have failed)
    assert {record["status"] for record in listed} <= {"Succeeded"}
    assert_nothing_left(tmp_path)
