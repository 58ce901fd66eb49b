"""A write the disk refuses, in an Airflow task (issue 47), through `airflow dags test` as a user runs it: the
task fails with one line naming the path, the cause and what to do, whether the write was refused before the run
began (the run index) or while it ran (the ledger), and no traceback of the refused write reaches the task log.
The failpoint (store/space.py) is in the command's environment."""

import pytest


@pytest.mark.parametrize(
    ("fault", "told"),
    [
        ("run_index:EROFS", "parallel step: {root}/index.sqlite: a read-only file system (make it writable"),
        ("ledger:EIO", "/ledger.sqlite: an I/O error (check the disk (the system log says more), then rerun"),
    ],
)
def test_a_refused_write_fails_the_task_in_one_line(run_dag, monkeypatch, tmp_path, fault, told):
    monkeypatch.setenv("PARALLEL_STEPS_FAULT", fault)
    run = run_dag("parallel_run_tabular")
    assert run.returncode == 1
    said = told.format(root=tmp_path / "runs")
    failures = [line for line in run.log.splitlines() if line.startswith("airflow.sdk.exceptions.AirflowException")]
    assert len(failures) == 1, run.log[-3000:]  # the task's failure is the one line
    assert said in failures[0], failures[0]
    assert "OSError" not in run.log
    assert "sqlite3." not in run.log
