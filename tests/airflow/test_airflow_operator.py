"""ParallelRunOperator called with an execution context: fields, templates, params, run directories,
failures, resume and on_kill, each through a real step on the local backend."""

import inspect
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from parallel_steps import ConfigError, ParallelRunConfig
from parallel_steps.airflow import ParallelRunOperator
from parallel_steps.report import key_figures

ECHO = """
def run(mini_batch):
    return [open(p).read().strip() for p in mini_batch]
"""


def operator(script: Path, data: Path, **fields) -> ParallelRunOperator:
    fields.setdefault("process_count_per_node", 2)
    return ParallelRunOperator(
        task_id=fields.pop("task_id", "step"), entry_script=str(script), inputs=str(data), **fields
    )


def in_dag(native: bool = False) -> DAG:
    """A DAG to create operators in, so templates render as Airflow renders them for that DAG."""
    return DAG(f"templates_native_{native}", schedule=None, render_template_as_native_obj=native)


class TestFields:
    def test_every_config_field_is_a_keyword_and_a_template_field(self):
        keywords = inspect.signature(ParallelRunOperator).parameters
        for name in ParallelRunConfig.model_fields:
            assert name in keywords
        assert len(ParallelRunOperator.template_fields) == len(ParallelRunConfig.model_fields)
        assert "output_folder" in ParallelRunOperator.template_fields  # BaseOperator.output stays the XComArg

    def test_an_invalid_static_value_fails_at_construction_naming_the_field(self):
        with pytest.raises(ConfigError, match=r"^mini_batch_size: '10XB' is not a size"):
            ParallelRunOperator(task_id="step", entry_script="score.py", inputs="data", mini_batch_size="10XB")
        with pytest.raises(ConfigError, match=r"^output_action: 'append' is not one of"):
            ParallelRunOperator(task_id="step", output_action="append")

    def test_an_invalid_static_value_of_a_mapped_step_fails_in_partial_naming_the_field(self):
        with DAG("mapped_bad", schedule=None):
            with pytest.raises(ConfigError, match=r"^error_threshold: -5 is not valid"):
                ParallelRunOperator.partial(task_id="step", entry_script="score.py", error_threshold=-5)
            mapped = ParallelRunOperator.partial(
                task_id="ok", entry_script="score.py", mini_batch_size="{{ params.size }}"
            ).expand(inputs=[["a"], ["b"]])
        assert mapped.partial_kwargs["mini_batch_size"] == "{{ params.size }}"

    def test_templates_and_xcomargs_are_checked_when_the_task_runs_not_at_parse_time(self):
        with DAG("deferred", schedule=None):
            upstream = ParallelRunOperator(task_id="upstream", entry_script="score.py", inputs="data")
            op = ParallelRunOperator(
                task_id="step",
                entry_script="score.py",
                inputs=upstream.output,
                mini_batch_size="{{ params.size }}",
                arguments=["--day", "{{ ds }}"],
            )
        assert op.mini_batch_size == "{{ params.size }}"
        assert op.upstream_task_ids == {"upstream"}  # an XComArg in a field sets the dependency

    def test_an_invalid_dag_file_is_an_import_error_that_names_the_field(self, tmp_path):
        from airflow.dag_processing.dagbag import DagBag

        (tmp_path / "dags").mkdir()
        (tmp_path / "dags" / "bad_dag.py").write_text(
            "from airflow.sdk import DAG\n"
            "from parallel_steps.airflow import ParallelRunOperator\n"
            "with DAG('bad', schedule=None):\n"
            "    ParallelRunOperator(task_id='score', entry_script='score.py', inputs='data', run_max_try=0)\n"
        )
        bag = DagBag(dag_folder=tmp_path / "dags")
        (error,) = bag.import_errors.values()
        assert "run_max_try: 0 is not valid" in error

    def test_the_example_dags_parse_without_errors(self):
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=Path(__file__).resolve().parents[2] / "dags")
        assert bag.import_errors == {}
        assert {"parallel_run_digits", "parallel_run_tabular", "parallel_run_mapped"} <= set(bag.dag_ids)

    def test_default_args_fill_config_fields(self):
        with DAG("defaults", schedule=None, default_args={"process_count_per_node": 3, "run_max_try": 1}):
            op = ParallelRunOperator(task_id="step", entry_script="score.py", inputs="data")
        assert (op.process_count_per_node, op.run_max_try) == (3, 1)

    def test_partial_and_expand_take_config_fields_and_reject_others(self):
        with DAG("mapped", schedule=None):
            ParallelRunOperator.partial(task_id="ok", entry_script="score.py").expand(inputs=["a", "b"])
            with pytest.raises(TypeError, match="mini_batch"):
                ParallelRunOperator.partial(task_id="bad", mini_batch=5).expand(inputs=["a"])


class TestExecute:
    def test_returns_the_summary_and_keys_the_run_directory_by_dag_task_run_and_map_index(
        self, write_script, make_files, context, tmp_path
    ):
        op = operator(write_script(ECHO), make_files(25), task_id="score_files", mini_batch_size=10)
        summary = op.execute(
            context(dag_id="my_dag", task_id="score_files", run_id="manual__2026-01-01T00:00:00+00:00", map_index=3)
        )
        assert summary["status"] == "Succeeded"
        assert summary["mini_batches_total"] == 3
        assert summary["name"] == "score-files"  # from the task id
        expected = tmp_path / "runs" / "airflow" / "my_dag" / "score_files" / "manual__2026-01-01T00_00_00_00_00" / "3"
        assert Path(summary["run_dir"]) == expected
        assert sorted(Path(summary["output_file"]).read_text().split()) == sorted(str(i) for i in range(25))
        assert "job_result" in summary
        assert "config" in summary

    def test_templated_strings_are_coerced_with_and_without_native_rendering(self, write_script, make_files, context):
        script, data = write_script(ECHO), make_files(12)
        for native in (False, True):
            with in_dag(native):
                op = operator(
                    script,
                    data,
                    mini_batch_size="{{ params.size }}",
                    allow_reuse="{{ params.reuse }}",
                    arguments="{{ params.args }}",
                )
            ctx = context(params={"size": 4, "reuse": False, "args": ["--alpha", 1]}, map_index=int(native))
            op.render_template_fields(ctx)
            summary = op.execute(ctx)
            assert summary["mini_batches_total"] == 3
            assert summary["config"]["allow_reuse"] is False
            assert summary["config"]["arguments"] == ["--alpha", "1"]

    def test_an_invalid_templated_value_fails_the_task_without_retry_naming_the_field(
        self, write_script, make_files, context
    ):
        with in_dag():
            op = operator(write_script(ECHO), make_files(3), mini_batch_size="{{ params.size }}")
        ctx = context(params={"size": "lots"})
        op.render_template_fields(ctx)
        with pytest.raises(AirflowFailException, match="mini_batch_size: 'lots' is not a size"):
            op.execute(ctx)

    def test_a_dag_param_or_conf_key_named_like_a_field_overrides_it(self, write_script, make_files, context, capsys):
        op = operator(write_script(ECHO), make_files(20), mini_batch_size=10)
        summary = op.execute(context(params={"mini_batch_size": 5, "error_threshold": None, "unrelated": 1}))
        assert summary["mini_batches_total"] == 4
        assert summary["config"]["error_threshold"] == -1  # a None param overrides nothing
        assert "override: mini_batch_size=5" in capsys.readouterr().out

    def test_params_override_can_be_limited_or_turned_off(self, write_script, make_files, context):
        script, data = write_script(ECHO), make_files(20)
        params = {"mini_batch_size": 5, "run_max_try": 1}
        off = operator(script, data, mini_batch_size=10, params_override=False).execute(context(params, map_index=0))
        assert off["mini_batches_total"] == 2
        assert off["config"]["run_max_try"] == 3
        named = ["run_max_try", "mini_batch_size"]
        some = operator(script, data, mini_batch_size=10, params_override=named).execute(context(params, map_index=1))
        assert some["mini_batches_total"] == 4
        assert some["config"]["run_max_try"] == 1
        with pytest.raises(ConfigError, match="params_override: 'batch' is not a configuration field"):
            operator(script, data, params_override=["batch"])

    def test_a_parallel_run_config_is_the_base_and_keywords_override_it(self, write_script, make_files, context):
        config = ParallelRunConfig(
            name="from-config",
            entry_script=str(write_script(ECHO)),
            inputs=[str(make_files(9))],
            mini_batch_size=3,
            process_count_per_node=2,
        )
        summary = ParallelRunOperator(task_id="step", parallel_run_config=config, run_max_try=1).execute(context())
        assert summary["name"] == "from-config"
        assert summary["mini_batches_total"] == 3
        assert summary["config"]["run_max_try"] == 1

    def test_progress_lines_stream_into_the_task_log_which_ends_with_the_report(
        self, write_script, make_files, context, capsys
    ):
        summary = operator(write_script(ECHO), make_files(6), mini_batch_size=2).execute(context())
        out = capsys.readouterr().out
        assert "progress: 3/3 mini-batches done" in out
        assert "Succeeded: every mini-batch succeeded" in out
        last = out.strip().splitlines()[-1]
        assert f"{key_figures(summary)}; report: {summary['report']}" in last
        assert Path(summary["report"]).is_file()


FLAKY = """
import os
from pathlib import Path

def run(mini_batch):
    if not Path(os.environ["FIXED"]).exists() and any(p.endswith(("f0003.txt", "f0007.txt")) for p in mini_batch):
        raise ValueError("data not ready")
    return [open(p).read().strip() for p in mini_batch]
"""


class TestFailureAndRetry:
    def test_a_failed_step_fails_the_task_with_the_reason_and_the_job_result_path(
        self, write_script, make_files, context, capsys, tmp_path
    ):
        op = operator(
            write_script(FLAKY),
            make_files(10),
            mini_batch_size=1,
            run_max_try=1,
            mini_batch_error_threshold=0,
            environment_variables={"FIXED": str(tmp_path / "fixed")},
        )
        ctx = context()
        with pytest.raises(AirflowException) as failure:
            op.execute(ctx)
        message = str(failure.value)
        assert "Failed" in message
        assert "mini_batch_error_threshold" in message
        job_result = ctx["ti"].pushed["parallel_run_summary"]["job_result"]
        assert job_result.endswith("logs/job_result.txt")
        assert job_result in message
        out = capsys.readouterr().out
        assert job_result in out
        assert "Status: Failed" in out
        summary = ctx["ti"].pushed["parallel_run_summary"]
        assert f"{key_figures(summary)}; report: {summary['report']}" in out
        assert "data not ready" in out  # failed mini-batches are reported as they happen

    def test_a_task_retry_resumes_the_step_and_runs_only_what_failed(self, write_script, make_files, context, tmp_path):
        op = operator(
            write_script(FLAKY),
            make_files(10),
            mini_batch_size=1,
            run_max_try=1,
            environment_variables={"FIXED": str(tmp_path / "fixed")},
            error_threshold=0,
        )
        with pytest.raises(AirflowException):
            op.execute(context())
        (tmp_path / "fixed").touch()
        summary = op.execute(context())  # the same task instance: the same run directory
        assert summary["status"] == "Succeeded"
        # One run across both tries: its own earlier results are not "reused", and none ran twice.
        assert (summary["mini_batches_succeeded"], summary["mini_batches_reused"]) == (10, 0)
        attempts = pd.read_csv(Path(summary["run_dir"]) / "logs/sys/job_report/processed_mini-batches.csv")
        successes = attempts[attempts.outcome == "succeeded"].groupby("mini_batch_id").size()
        assert sorted(successes.index) == list(range(10))
        assert set(successes) == {1}
        assert len(attempts[attempts.outcome == "failed"]) == 1
        assert sorted(Path(summary["output_file"]).read_text().split()) == sorted(str(i) for i in range(10))

    def test_a_second_dag_run_reuses_the_first_runs_results(self, write_script, make_files, context):
        script, data = write_script(ECHO), make_files(8)
        first = operator(script, data, mini_batch_size=2).execute(context(run_id="scheduled__1"))
        second = operator(script, data, mini_batch_size=2).execute(context(run_id="scheduled__2"))
        assert (first["reused"], second["reused"]) == (False, True)
        assert second["workers_started"] == 0
        assert Path(second["output_file"]).read_text() == Path(first["output_file"]).read_text()
        assert Path(second["output_file"]).parent.parent.name == "-1"
        assert "scheduled__2" in second["output_file"]


SLOW = """
import os, time
from pathlib import Path

def run(mini_batch):
    Path(os.environ["STARTED"], str(os.getpid())).touch()
    time.sleep(120)
    return mini_batch
"""


def _workers() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            alive = child.status() != psutil.STATUS_ZOMBIE
            if alive and "parallel_steps.pool.local.worker_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


class TestOnKill:
    def test_on_kill_stops_every_worker_and_fails_the_task_as_canceled(
        self, write_script, make_files, context, tmp_path
    ):
        started = tmp_path / "started"
        started.mkdir()
        op = operator(
            write_script(SLOW),
            make_files(4),
            mini_batch_size=1,
            run_invocation_timeout=300,
            environment_variables={"STARTED": str(started)},
        )
        outcome: dict = {}

        def execute():
            try:
                outcome["summary"] = op.execute(context())
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=execute)
        thread.start()
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(list(started.iterdir())) == 2, outcome
        busy = [int(p.name) for p in started.iterdir()]
        assert {w.pid for w in _workers()} >= set(busy)

        op.on_kill()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert isinstance(outcome.get("error"), AirflowException)
        assert "Canceled" in str(outcome["error"])
        assert "killed (on_kill)" in str(outcome["error"])
        assert _workers() == []
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in busy)


class TestRayBackend:
    def test_the_operator_runs_a_step_on_ray(self, write_script, make_files, context):
        with in_dag():
            op = operator(
                write_script(ECHO),
                make_files(6),
                mini_batch_size=2,
                backend="ray",
                ray_address="{{ params.ray_address }}",
            )
        ctx = context(params={"ray_address": None})
        op.render_template_fields(ctx)
        summary = op.execute(ctx)
        assert summary["status"] == "Succeeded"
        assert summary["mini_batches_total"] == 3
        assert summary["config"]["backend"] == "ray"
        assert summary["config"]["ray_address"] is None
        assert sorted(Path(summary["output_file"]).read_text().split()) == [str(i) for i in range(6)]
