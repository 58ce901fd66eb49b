"""Fixtures of the Prefect suite: one temporary Prefect server for the session, a run root and working
directory per test, entry scripts and inputs written as small files per test.

The server is a child process (uvicorn). It starts in a session fixture, before any test, so the
leftover-process check counts it as already there and still catches every worker a test leaves.
"""

import sys

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


@pytest.fixture
def excused_process():
    """A process that was already running before the test (the served deployment's runner) may keep the
    multiprocessing resource tracker it starts for its flow-run subprocesses. Everything else a test
    starts, parallel-steps workers above all, must be gone (tests/conftest.py)."""

    def excused(process, before) -> bool:
        return process.ppid() in before and "multiprocessing.resource_tracker" in " ".join(process.cmdline())

    return excused


@pytest.fixture(scope="session")
def example_flows():
    """flows/ importable as in `python flows/tabular_flow.py`."""
    sys.path.insert(0, str(FLOWS))
    yield FLOWS
    sys.path.remove(str(FLOWS))
