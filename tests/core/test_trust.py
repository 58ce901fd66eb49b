"""Secrets stay in the workers' environment, names that become paths are checked, and files are
created with the caller's umask: what a shared deployment relies on (issue 14)."""

import json
import os
import stat
import subprocess
from pathlib import Path

from .conftest import CLI, cli, cli_json

SECRET = "s3cr3t-token-value"

ECHO_ENV = """
import os
def run(mini_batch):
    return [os.environ["TOKEN"] + ":" + os.environ["FROM_CALLER"] for _ in mini_batch]
"""


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_secret_values_reach_the_workers_and_nothing_else(tmp_path, make_files, write_script):
    make_files(3)
    write_script(ECHO_ENV)
    env = {"CALLER_SECRET": "caller-" + SECRET}
    settings = ["--set", f"environment_variables={{TOKEN: {SECRET}, FROM_CALLER: '${{env:CALLER_SECRET}}'}}"]
    result = cli(
        "run", "--entry-script", "score.py", "--input", "data", "--output", "out", *settings, "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["config"]["environment_variables"] == {"TOKEN": "***", "FROM_CALLER": "${env:CALLER_SECRET}"}
    assert Path(summary["output_file"]).read_text().splitlines() == [f"{SECRET}:caller-{SECRET}"] * 3
    code, status = cli_json("status", summary["run_id"])
    assert code == 0
    assert SECRET not in json.dumps(status)
    leaked = [p for p in _files_under(Path(summary["run_dir"])) if SECRET.encode() in p.read_bytes()]
    assert all(p.parent.name == "parts" for p in leaked), leaked  # only the results run() returned


def test_a_detached_run_gets_its_secrets_without_writing_them_down(tmp_path, make_files, write_script):
    make_files(2)
    write_script(ECHO_ENV)
    settings = ["--set", f"environment_variables={{TOKEN: {SECRET}, FROM_CALLER: x}}"]
    detached = cli("run", "--entry-script", "score.py", "--input", "data", "--output", "out", *settings, "--detach")
    assert detached.returncode == 0, detached.stderr
    run_id, run_dir = detached.stdout.split()
    code, summary = cli_json("wait", run_id, "--timeout", "120")
    assert code == 0, summary
    assert Path(summary["output_file"]).read_text().splitlines() == [f"{SECRET}:x"] * 2
    assert SECRET not in (Path(run_dir) / "step.json").read_text()


def test_an_environment_reference_to_an_unset_variable_is_one_line(make_files, write_script):
    make_files(1)
    write_script(ECHO_ENV)
    result = cli(
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--output",
        "out",
        "--set",
        "environment_variables={TOKEN: '${env:NOT_SET_ANYWHERE}'}",
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "parallel-steps: environment_variables: TOKEN: ${env:NOT_SET_ANYWHERE} is not set in the environment of the "
        "process that runs the step"
    )
    assert not Path("out").exists()


def test_side_input_names_are_single_safe_names(make_files, write_script):
    make_files(1)
    write_script(ECHO_ENV)
    for name in ("a/b", "../../up", ".hidden"):
        result = cli("run", "--entry-script", "score.py", "--input", "data", "--set", f"side_inputs={{'{name}': data}}")
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().startswith(f"parallel-steps: side_inputs: {name!r} is not a valid name")


def test_exit_codes_cannot_be_retried_on_ray(make_files, write_script):
    make_files(1)
    write_script(ECHO_ENV)
    result = cli("plan", "--input", "data", "--set", "backend=ray", "--set", "retryable_exit_codes=[3]")
    assert result.returncode == 2
    assert "retryable_exit_codes: Ray does not report the exit code of a lost worker" in result.stderr


def test_run_files_follow_the_callers_umask(tmp_path, make_files, write_script):
    make_files(2)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    command = [
        *CLI,
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--output",
        "out",
        "--json",
    ]
    result = subprocess.run(command, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o077), timeout=300)
    assert result.returncode == 0, result.stderr
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    exposed = [
        p for p in [*_files_under(run_dir), *_files_under(tmp_path / "out")] if stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert exposed == []
