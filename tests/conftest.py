"""Shared by every suite: no test may leave a worker process behind (checked with psutil, as loky does)."""

import os
import time

import psutil
import pytest


def _children() -> set[int]:
    alive = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                alive.add(process.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.fixture(autouse=True)
def no_leftover_processes(request):
    if request.node.get_closest_marker("allow_children"):
        yield
        return
    before = _children()
    yield
    deadline = time.monotonic() + 10
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {[psutil.Process(p).cmdline() for p in left if psutil.pid_exists(p)]}"


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_children: the test may leave long-lived children (e.g. a Ray cluster)")
    os.environ.setdefault("PARALLEL_STEPS_GPU_COUNT", "0")
