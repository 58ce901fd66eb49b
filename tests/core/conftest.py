"""Helpers of the core suite: run the CLI as a user would (fixtures shared by every suite are in tests/conftest.py)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from storage_servers import Store, azure_store, s3_store, started_servers

#: `parallel-steps` as a command line, for tests that start it themselves (Popen, signals).
CLI = [sys.executable, "-m", "parallel_steps.cli"]


def cli(*args: str, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Run `parallel-steps ARGS` as a user would."""
    return subprocess.run(
        [*CLI, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def cli_json(*args: str, **kwargs) -> tuple[int, dict]:
    result = cli(*args, "--json", **kwargs)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


def output_lines(summary: dict) -> list[str]:
    return Path(summary["output_file"]).read_text().splitlines()


# Storage servers (tests/storage_servers.py): started once per session, when a test first asks for a store.


@pytest.fixture(scope="session")
def storage_servers(tmp_path_factory):
    """moto's S3 server and Azurite, on loopback ports, for the whole session."""
    with started_servers(tmp_path_factory.mktemp("storage-servers")) as servers:
        yield servers


@pytest.fixture(scope="session", params=["file", "s3", "azure"])
def store_kind(request):
    """Each store the URL suite runs against; the servers start only for the tests that need one."""
    if request.param != "file":
        request.getfixturevalue("storage_servers")
    return request.param


@pytest.fixture
def store(store_kind, request, tmp_path, monkeypatch) -> Store:
    """A fresh bucket, container or folder for this test, and its secrets in the environment."""
    name = f"t{uuid.uuid4().hex[:12]}"
    if store_kind == "file":
        made = Store("file", "file://", f"file://{tmp_path / 'store' / name}")
        (tmp_path / "store" / name).mkdir(parents=True)
    else:
        moto, azurite = request.getfixturevalue("storage_servers")
        made = s3_store(moto.endpoint, name) if store_kind == "s3" else azure_store(azurite.endpoint, name)
    for variable, value in made.env.items():
        monkeypatch.setenv(variable, value)
    return made
