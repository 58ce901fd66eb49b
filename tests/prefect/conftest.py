"""Fixtures of the Prefect suite: one temporary Prefect server for the session, a run root and working
directory per test, entry scripts and inputs written as small files per test.

The server is a child process (uvicorn). It starts in a session fixture, before any test, so the
leftover-process check counts it as already there and still catches every worker a test leaves.
"""

import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from prefect.settings import PREFECT_API_URL, PREFECT_LOCAL_STORAGE_PATH, temporary_settings
from prefect.testing.utilities import prefect_test_harness

from prefect_helpers import FLOWS


@pytest.fixture(scope="session", autouse=True)
def prefect_server(tmp_path_factory):
    """The Prefect API every test talks to; results and cache records live in a session folder."""
    storage = tmp_path_factory.mktemp("prefect-results")
    with temporary_settings({PREFECT_LOCAL_STORAGE_PATH: storage}), prefect_test_harness(server_startup_timeout=180):
        yield {"PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_LOCAL_STORAGE_PATH": str(storage)}


@pytest.fixture(autouse=True)
def no_leftover_processes(request):
    """The shared check (tests/conftest.py), plus one excuse: a process that was already running before the
    test (the served deployment's runner) may keep the multiprocessing resource tracker it starts for its
    flow-run subprocesses. Everything else a test starts, parallel-steps workers above all, must be gone."""
    if request.node.get_closest_marker("allow_children"):
        yield
        return
    before = _children()
    yield
    deadline = time.monotonic() + 10
    while (left := _unexcused(_children() - before, before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {[_cmdline(pid) for pid in left]}"


def _children() -> set[int]:
    alive = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.add(process.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _unexcused(new: set[int], before: set[int]) -> set[int]:
    left = set()
    for pid in new:
        try:
            process = psutil.Process(pid)
            helper = process.ppid() in before and "multiprocessing.resource_tracker" in " ".join(process.cmdline())
        except psutil.NoSuchProcess:
            continue
        if not helper:
            left.add(pid)
    return left


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return ["(exited)"]


@pytest.fixture(autouse=True)
def isolated_run_root(tmp_path, monkeypatch):
    """Every test gets its own run root and working directory."""
    monkeypatch.setenv("PARALLEL_STEPS_HOME", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def example_flows():
    """flows/ importable as in `python flows/tabular_flow.py`."""
    sys.path.insert(0, str(FLOWS))
    yield FLOWS
    sys.path.remove(str(FLOWS))


@pytest.fixture
def write_script(tmp_path):
    def write(body: str, name: str = "score.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(body))
        return path

    return write


@pytest.fixture
def make_files(tmp_path):
    def make(count: int, folder: str = "data") -> Path:
        root = tmp_path / folder
        root.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (root / f"f{i:04d}.txt").write_text(f"{i}\n")
        return root

    return make
