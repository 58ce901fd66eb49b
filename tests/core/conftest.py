"""Helpers of the core suite: run the CLI as a user would (fixtures shared by every suite are in tests/conftest.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
