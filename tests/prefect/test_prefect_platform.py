"""On another OS than Linux a flow's `parallel_run` task fails at once with one line, before any worker starts."""

import sys

import pytest

from parallel_steps.errors import UnsupportedPlatform
from parallel_steps.prefect import parallel_run
from prefect import flow


@flow
def one_step(**fields):
    return parallel_run(**fields)


def test_the_task_run_fails_at_once_on_another_os(write_script, make_files, monkeypatch, tmp_path):
    script, data = write_script("def run(mini_batch):\n    return mini_batch\n"), make_files(2)
    monkeypatch.setattr(sys, "platform", "darwin")

    with pytest.raises(
        UnsupportedPlatform, match=r"^platform: 'darwin' is not supported \(parallel-steps runs on Linux"
    ):
        one_step(entry_script=str(script), inputs=str(data))

    assert not (tmp_path / "runs").exists()
