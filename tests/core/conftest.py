"""Fixtures of the core suite: entry scripts written as small files, inputs generated per test."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_run_root(tmp_path, monkeypatch):
    """Every test gets its own run root and working directory."""
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


def cli(*args: str, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Run `parallel-steps ARGS` as a user would."""
    return subprocess.run([sys.executable, "-m", "parallel_steps.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


def cli_json(*args: str, **kwargs) -> tuple[int, dict]:
    result = cli(*args, "--json", **kwargs)
    assert result.stdout.strip(), result.stderr
    return result.returncode, json.loads(result.stdout)


def output_lines(summary: dict) -> list[str]:
    return Path(summary["output_file"]).read_text().splitlines()
