"""On another OS than Linux the operator's task fails at once, not retried, with one line; parsing still works
(a scheduler may parse DAGs on a laptop while the tasks run on Linux)."""

import sys

import pytest
from airflow.sdk.exceptions import AirflowFailException

from parallel_steps.airflow import ParallelRunOperator


def test_the_task_fails_at_once_on_another_os(write_script, make_files, context, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    step = ParallelRunOperator(
        task_id="step", entry_script=str(write_script("def run(b):\n    return b\n")), inputs=str(make_files(2))
    )

    with pytest.raises(AirflowFailException) as failed:
        step.execute(context())

    assert str(failed.value) == (
        "invalid configuration: platform: 'darwin' is not supported "
        "(parallel-steps runs on Linux only; use a Linux machine, container or VM)"
    )
    assert not (tmp_path / "runs").exists()
