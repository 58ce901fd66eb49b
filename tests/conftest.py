"""Shared by every suite: each test gets its own run root and working folder, entry scripts and inputs
are written as small files per test, and no test may leave a process behind (checked with psutil,
as loky does)."""

import os
import textwrap
import time
from pathlib import Path

import psutil
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_children: the test may leave long-lived children (e.g. a Ray cluster)")
    os.environ.setdefault("PARALLEL_STEPS_GPU_COUNT", "0")


@pytest.fixture(autouse=True)
def isolated_run_root(tmp_path, monkeypatch):
    """In-process runs land in this test's folder, and relative paths start there."""
    monkeypatch.setenv("PARALLEL_STEPS_HOME", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)


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


@pytest.fixture
def excused_process():
    """`excused(process, before) -> bool`: a process a suite lets outlive a test (override per suite)."""
    return lambda process, before: False


@pytest.fixture(autouse=True)
def no_leftover_processes(request, excused_process):
    if request.node.get_closest_marker("allow_children"):
        yield
        return
    before = children()
    yield
    deadline = time.monotonic() + 10
    while (left := _unexcused(children() - before, before, excused_process)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {[_cmdline(pid) for pid in left]}"


def children() -> set[int]:
    alive = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.add(process.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _unexcused(new: set[int], before: set[int], excused) -> set[int]:
    left = set()
    for pid in new:
        try:
            if not excused(psutil.Process(pid), before):
                left.add(pid)
        except psutil.NoSuchProcess:
            continue
    return left


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        return ["(exited)"]
