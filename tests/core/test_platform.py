"""Another OS than Linux: the CLI stops at once with one line (exit 2) and starts nothing; `--version` still answers."""

import sys

import pytest

import parallel_steps
import parallel_steps.config  # imported before sys.platform is faked: the standard library reads it while importing
from parallel_steps.cli import main


def test_cli_on_another_os_fails_with_one_line_and_writes_nothing(tmp_path, make_files, monkeypatch, capsys):
    make_files(3)
    (tmp_path / "score.py").write_text("def run(mini_batch):\n    return mini_batch\n")
    monkeypatch.setattr(sys, "platform", "darwin")

    status = main(["run", "--entry-script", "score.py", "--input", "data", "--output", "out"])

    err = capsys.readouterr().err
    assert status == 2
    assert err.splitlines() == [
        "parallel-steps: platform: 'darwin' is not supported "
        "(parallel-steps runs on Linux only; use a Linux machine, container or VM)"
    ]
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "runs").exists()


def test_version_answers_on_any_os(monkeypatch, capsys):
    monkeypatch.setattr(sys, "platform", "win32")
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"parallel-steps {parallel_steps.__version__}\n"
