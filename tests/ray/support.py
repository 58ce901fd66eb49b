"""Helpers for the Ray suite: input files, entry scripts written into tmp_path, and readers of a run's results."""

from __future__ import annotations

import csv
import json
import os
import socket
import sys
import textwrap
from pathlib import Path

import psutil

from ray_session import NODE_ARGS  # noqa: F401  (the simulated nodes, for tests that add one)

#: The console script of this environment.
CLI = str(Path(sys.executable).parent / "parallel-steps")

#: Lines an entry script can use to record, once per worker, what the worker saw in init().
MARKER_CODE = textwrap.dedent('''
    import json, os, time

    def _write_marker(**extra):
        """One JSON file per worker in $MARKERS: its PARALLEL_STEPS_* variables, GPU and Ray node."""
        import ray
        env = {k: v for k, v in os.environ.items() if k.startswith("PARALLEL_STEPS_") or k == "CUDA_VISIBLE_DEVICES"}
        info = dict(env=env, ray_node=ray.get_runtime_context().get_node_id(), pid=os.getpid(), **extra)
        name = f"node{env['PARALLEL_STEPS_NODE_INDEX']}-{env['PARALLEL_STEPS_PROCESS_NAME']}.json"
        folder = os.environ["MARKERS"]
        with open(os.path.join(folder, "." + name), "w") as file:
            json.dump(info, file)
        os.rename(os.path.join(folder, "." + name), os.path.join(folder, name))

    def _wait_for_files(folder, count, timeout, what):
        """Hold until `folder` has `count` files (those being written, named ".*", aside)."""
        deadline = time.monotonic() + timeout
        while len([n for n in os.listdir(folder) if not n.startswith(".")]) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} workers {what}")
            time.sleep(0.05)

    def _wait_for_markers(count, timeout=120):
        """Hold run() until `count` workers have written their marker (so all of them take part)."""
        _wait_for_files(os.environ["MARKERS"], count, timeout, "started")

    def _wait_for_runs(count, timeout=120):
        """Hold run() until `count` workers are in run(): once the first run() returns, the queues deepen
        and the rest may go to the workers that were ready first (init() markers cannot promise a share)."""
        folder = os.path.join(os.environ["FLAGS"], "running")
        os.makedirs(folder, exist_ok=True)
        name = f"node{os.environ['PARALLEL_STEPS_NODE_INDEX']}-{os.environ['PARALLEL_STEPS_PROCESS_NAME']}"
        open(os.path.join(folder, name), "w").close()
        _wait_for_files(folder, count, timeout, "ran")

    def _first_time(name):
        """True once per name across all attempts and workers (a flag file in $FLAGS)."""
        try:
            os.close(os.open(os.path.join(os.environ["FLAGS"], name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            return False
''')


def make_inputs(folder: Path, names: list[str]) -> list[str]:
    """One small text file per name; returns the names in the order the planner reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(f"content of {name}\n")
    return sorted(names)


def write_entry_script(folder: Path, body: str, name: str = "score.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(MARKER_CODE + textwrap.dedent(body))
    return path


def output_lines(summary: dict) -> list[str]:
    return Path(summary["output_file"]).read_text().splitlines()


def markers(folder: Path) -> dict[str, dict]:
    """Worker markers by `nodeN-processNNN`."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def processed(summary: dict) -> list[dict[str, str]]:
    """Rows of logs/sys/job_report/processed_mini-batches.csv."""
    path = Path(summary["run_dir"]) / "logs" / "sys" / "job_report" / "processed_mini-batches.csv"
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def outcomes_by_mini_batch(summary: dict) -> dict[int, list[str]]:
    result: dict[int, list[str]] = {}
    for row in sorted(processed(summary), key=lambda r: (int(r["mini_batch_id"]), int(r["attempt"]))):
        result.setdefault(int(row["mini_batch_id"]), []).append(row["outcome"])
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def folders(tmp_path: Path) -> dict[str, str]:
    """The MARKERS and FLAGS folders entry scripts use, as worker environment variables."""
    env = {}
    for name in ("markers", "flags"):
        (tmp_path / name).mkdir(exist_ok=True)
        env[name.upper()] = str(tmp_path / name)
    return env


def read_json_stdout(text: str) -> dict:
    """The last line of a CLI's stdout that is a JSON object (Ray may print before it)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON summary in output: {text[-2000:]}")


def environ(**extra: str) -> dict[str, str]:
    """This process's environment for a CLI subprocess, without anything that would attach it to a cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "AWS_BATCH_", "SLURM_"))}
    env.update(extra)
    return env


def processes_in(folder: Path) -> list[psutil.Process]:
    """Live processes on this machine, other than this one, working in `folder` or below it. The commands a test
    starts there pass their working directory on to what they start (Ray's daemons and agents, which retitle
    themselves), so a test finds its own processes even while other suites run Ray on the same machine."""
    found = []
    for process in psutil.process_iter():
        try:
            mine = process.pid != os.getpid() and Path(process.cwd()).is_relative_to(folder)
            if mine and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found
