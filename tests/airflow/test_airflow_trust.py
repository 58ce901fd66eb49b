"""Trigger-time input is untrusted: DAG params and trigger conf may change only the fields a DAG
author opened (by default those that change neither code, environment nor paths), and secret
values never reach XCom or the task log."""

import json
from pathlib import Path

import pytest
from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException

from parallel_steps.airflow import ParallelRunOperator
from parallel_steps.config.trust import OVERRIDABLE

ECHO = """
import os
def run(mini_batch):
    return [open(p).read().strip() + os.environ.get("TAG", "") for p in mini_batch]
"""

UNSAFE = {
    "entry_script": "other.py",
    "environment_variables": {"PYTHONPATH": "/tmp/evil"},
    "arguments": ["--model", "/tmp/evil"],
    "source_directory": "/tmp",
    "run_root": "/tmp/elsewhere",
    "output": "/tmp/somewhere-else",
}


def operator(script: Path, data: Path, **fields) -> ParallelRunOperator:
    return ParallelRunOperator(
        task_id="score", entry_script=str(script), inputs=str(data), process_count_per_node=1, **fields
    )


@pytest.mark.parametrize("field", sorted(UNSAFE))
def test_trigger_conf_naming_an_unsafe_field_fails_the_task_naming_it(
    field, write_script, make_files, context, tmp_path
):
    op = operator(write_script(ECHO), make_files(4))
    with pytest.raises(AirflowFailException) as failed:
        op.execute(context(params={field: UNSAFE[field], "mini_batch_size": 2}))
    message = str(failed.value)
    assert len(message.splitlines()) == 1
    assert f"{field}: may not be set by trigger-time input" in message
    assert f"params_override=[..., '{field}']" in message
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("run.json"))  # nothing ran


def test_safe_fields_still_override_by_default(write_script, make_files, context):
    summary = operator(write_script(ECHO), make_files(6)).execute(
        context(params={"mini_batch_size": 2, "error_threshold": 0, "unrelated": "kept out"})
    )
    assert summary["mini_batches_total"] == 3
    assert summary["config"]["error_threshold"] == 0
    assert {"mini_batch_size", "error_threshold", "run_max_try", "process_count_per_node"} <= OVERRIDABLE
    assert not {"entry_script", "environment_variables", "inputs", "output", "run_root", "backend"} & OVERRIDABLE


def test_a_dag_author_opens_a_field_by_name_or_everything_with_all(write_script, make_files, context, capsys):
    script, data = write_script(ECHO), make_files(2)
    other = write_script(ECHO.replace('""', '"!"'), name="other.py")
    opened = operator(script, data, params_override=["entry_script"]).execute(
        context(params={"entry_script": str(other)}, map_index=0)
    )
    assert opened["config"]["entry_script"] == str(other)
    with pytest.raises(AirflowFailException, match="mini_batch_size: may not be set"):
        operator(script, data, params_override=["entry_script"]).execute(
            context(params={"mini_batch_size": 1}, map_index=1)
        )
    everything = operator(script, data, params_override="all").execute(
        context(params={"arguments": ["--x"], "mini_batch_size": 1}, map_index=2)
    )
    assert everything["config"]["arguments"] == ["--x"]
    assert "params_override='all'" in capsys.readouterr().out


def test_the_decorator_follows_the_same_rules(write_script, make_files, context):
    data = make_files(2)

    @task.parallel_run(inputs=str(data), process_count_per_node=1)
    def echo(mini_batch):
        return mini_batch

    op = echo().operator
    with pytest.raises(AirflowFailException, match="environment_variables: may not be set by trigger-time input"):
        op.execute(context(params={"environment_variables": {"LD_PRELOAD": "/tmp/evil.so"}}, task_id="echo"))


def test_secret_values_stay_out_of_xcom_and_the_task_log(write_script, make_files, context, monkeypatch, capsys):
    monkeypatch.setenv("API_TOKEN", "tok-from-the-scheduler-env")
    op = operator(
        write_script(ECHO),
        make_files(2),
        environment_variables={"TAG": "-literal-secret-value", "TOKEN": "${env:API_TOKEN}"},
    )
    summary = op.execute(context(params={"mini_batch_size": 1, "error_threshold": 0}))
    assert summary["config"]["environment_variables"] == {"TAG": "***", "TOKEN": "${env:API_TOKEN}"}
    rows = Path(summary["output_file"]).read_text().split()
    assert rows == ["0-literal-secret-value", "1-literal-secret-value"]  # the worker got the value
    assert "literal-secret-value" not in json.dumps(summary)
    run_json = Path(summary["run_dir"]) / "run.json"
    assert "literal-secret-value" not in run_json.read_text()
    assert "tok-from-the-scheduler-env" not in run_json.read_text()
    task_log = capsys.readouterr()
    assert "override: mini_batch_size=1" in task_log.out
    assert "literal-secret-value" not in task_log.out + task_log.err
