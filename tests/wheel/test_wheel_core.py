"""The installed wheel, core environment: package files, the `parallel-steps` command and the main job
(the digits batch scoring of scripts/main-job) run from a folder outside the source tree."""

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import parallel_steps

BIN = Path(sys.executable).parent
DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_wheel_has_its_version_and_type_marker(installed_wheel):
    assert version("parallel-steps") == parallel_steps.__version__
    assert (installed_wheel / "py.typed").is_file()


def test_the_command_prints_the_version():
    assert run(BIN / "parallel-steps", "--version").stdout == f"parallel-steps {parallel_steps.__version__}\n"


def test_the_main_job_scores_the_digits(tmp_path):
    digits = tmp_path / "digits"
    shutil.copytree(DIGITS, digits, ignore=shutil.ignore_patterns("data", "models", "out", "__pycache__"))
    run(sys.executable, digits / "prepare.py")

    summary = json.loads(run(BIN / "parallel-steps", "run", digits / "step.yaml", "--json").stdout)

    assert (summary["status"], summary["mini_batches_total"], summary["items_succeeded"]) == ("Succeeded", 45, 450)
    assert summary["output_file"] == str(digits / "out" / "predictions.txt")
    line = run(sys.executable, digits / "accuracy.py", summary["output_file"]).stdout
    assert float(line.split()[1]) > 0.9, line
