"""The `parallel_run` task in real flow runs: summary, artifacts, failure, caching, retries, config forms."""

from pathlib import Path

import pytest
from prefect_helpers import artifacts, flow_run_id, summary_table, table, task_states

from parallel_steps import ParallelRunConfig, StepFailed
from parallel_steps.prefect import ParallelRunFailed, parallel_run
from parallel_steps.report import key_figures
from prefect import flow

ECHO = """
    def init():
        pass

    def run(mini_batch):
        return [open(path).read().strip() for path in mini_batch]
"""


@flow
def one_step(**fields):
    return parallel_run(**fields)


_state: dict = {}


def set_up() -> None:
    _state["prefix"] = "flow"


def label(mini_batch):
    """A run function written in the flow's own file, which no worker can import."""
    return [f"{_state['prefix']}:{open(path).read().strip()}" for path in mini_batch]


def output_lines(summary: dict) -> list[str]:
    return Path(summary["output_file"]).read_text().split()


class TestRun:
    def test_returns_the_summary_and_publishes_artifacts(self, write_script, make_files):
        script, data = write_script(ECHO), make_files(20)
        state = one_step(
            entry_script=str(script),
            inputs=str(data),
            mini_batch_size=5,
            process_count_per_node=2,
            name="echo",
            return_state=True,
        )
        summary = state.result()
        assert (summary["status"], summary["mini_batches_total"], summary["items_succeeded"]) == ("Succeeded", 4, 20)
        assert sorted(output_lines(summary), key=int) == [str(i) for i in range(20)]
        run = flow_run_id(state)
        progress = artifacts(run, "echo-progress")
        assert [a.data for a in progress] == [100.0]
        assert "4/4 mini-batches done; Succeeded" in progress[0].description
        shown = summary_table(run, "echo")
        assert shown["status"] == "Succeeded"
        assert shown["mini_batches_total"] == 4
        assert shown["config.mini_batch_size"] == 5
        assert shown["output_file"] == summary["output_file"]
        assert artifacts(run, "echo-failed-mini-batches") == []
        (report,) = artifacts(run, "echo-report")
        assert report.type == "markdown"
        assert key_figures(summary) in report.data
        assert f"Report: `{summary['report']}`" in report.data
        assert "No errors." in report.data
        assert Path(summary["report"]).is_file()

    def test_run_and_init_functions_from_the_flow_file_run_in_the_workers(self, make_files):
        @flow
        def labelled(inputs: str):
            return parallel_run(run=label, init=set_up, inputs=inputs, mini_batch_size=2, name="labelled")

        summary = labelled(str(make_files(5)))
        assert (summary["status"], summary["mini_batches_total"]) == ("Succeeded", 3)
        assert output_lines(summary) == [f"flow:{i}" for i in range(5)]

    def test_takes_a_config_a_dict_or_a_step_file_with_field_overrides(self, write_script, make_files, tmp_path):
        script, data = write_script(ECHO), make_files(6)
        (tmp_path / "step.yaml").write_text(f"name: from-yaml\nentry_script: {script.name}\ninputs: [data]\n")
        base = ParallelRunConfig(name="from-config", entry_script=str(script), inputs=[str(data)])

        @flow
        def three_forms():
            return [
                parallel_run(base, mini_batch_size=2, process_count_per_node=1),
                parallel_run(
                    {"name": "from-dict", "entry_script": str(script), "inputs": str(data)},
                    mini_batch_size=3,
                    process_count_per_node=1,
                ),
                parallel_run(str(tmp_path / "step.yaml"), mini_batch_size=None, process_count_per_node=1),
            ]

        summaries = three_forms()
        assert [(s["name"], s["mini_batches_total"]) for s in summaries] == [
            ("from-config", 3),
            ("from-dict", 2),
            ("from-yaml", 1),
        ]

    def test_submitted_steps_run_side_by_side_in_their_own_run_directories(self, write_script, make_files):
        script = write_script(ECHO)
        first, second = make_files(4, "first"), make_files(6, "second")

        @flow
        def two_steps():
            futures = [
                parallel_run.submit(
                    entry_script=str(script),
                    inputs=str(folder),
                    mini_batch_size=2,
                    process_count_per_node=1,
                    name="side",
                )
                for folder in (first, second)
            ]
            return [future.result() for future in futures]

        summaries = two_steps()
        assert [s["mini_batches_total"] for s in summaries] == [2, 3]
        assert summaries[0]["run_dir"] != summaries[1]["run_dir"]

    def test_an_invalid_field_fails_the_task_run_naming_the_field(self, write_script, make_files):
        state = one_step(
            entry_script=str(write_script(ECHO)), inputs=str(make_files(2)), mini_batch_size="10XB", return_state=True
        )
        assert state.is_failed()
        with pytest.raises(ValueError, match="mini_batch_size: '10XB' is not a size"):
            state.result()


FAIL_ON_F3 = """
    def init():
        pass

    def run(mini_batch):
        if any(path.endswith("f0003.txt") for path in mini_batch):
            raise RuntimeError("corrupt input f0003")
        return [open(path).read().strip() for path in mini_batch]
"""


class TestFailure:
    def test_a_failed_step_fails_task_and_flow_with_the_reason(self, write_script, make_files):
        state = one_step(
            entry_script=str(write_script(FAIL_ON_F3)),
            inputs=str(make_files(8)),
            mini_batch_size=2,
            process_count_per_node=2,
            run_max_try=2,
            mini_batch_error_threshold=0,
            name="breaks",
            return_state=True,
        )
        assert state.is_failed()
        with pytest.raises(ParallelRunFailed) as raised:
            state.result()
        assert isinstance(raised.value, StepFailed)
        assert raised.value.summary["status"] == "Failed"
        message = str(raised.value)
        assert "mini_batch_error_threshold" in message
        assert "logs/job_result.txt" in message
        run = flow_run_id(state)
        assert task_states(run) == {"breaks": "Failed"}
        assert "mini_batch_error_threshold" in summary_table(run, "breaks")["status_reason"]
        failed = table(run, "breaks-failed-mini-batches")
        assert [(row["idx"], row["attempts"]) for row in failed] == [(1, 2)]
        assert "corrupt input f0003" in failed[0]["error"]
        (report,) = artifacts(run, "breaks-report")
        summary = raised.value.summary
        assert key_figures(summary) in report.data
        assert "#### Errors (1 distinct)" in report.data
        (group,) = [line for line in report.data.splitlines() if line.startswith("| 2 |")]
        assert group.startswith("| 2 | 1 | `RuntimeError: corrupt input f0003` | mini-batch 1 on node0/process00")
        assert Path(summary["report"]).is_file()


class TestReuse:
    def test_an_identical_rerun_is_cached_with_the_earlier_summary(self, write_script, make_files):
        fields = dict(
            entry_script=str(write_script(ECHO)),
            inputs=str(make_files(6)),
            mini_batch_size=3,
            process_count_per_node=1,
            name="cached",
        )
        first = one_step(**fields, return_state=True)
        second = one_step(**fields, return_state=True)
        assert task_states(flow_run_id(first)) == {"cached": "Completed"}
        assert task_states(flow_run_id(second)) == {"cached": "Cached"}
        assert second.result() == first.result()

    def test_a_changed_setting_or_allow_reuse_false_runs_again(self, write_script, make_files):
        fields = dict(
            entry_script=str(write_script(ECHO)), inputs=str(make_files(6)), process_count_per_node=1, name="uncached"
        )
        one_step(**fields, mini_batch_size=3)
        resized = one_step(**fields, mini_batch_size=2, return_state=True)
        forced = one_step(**fields, mini_batch_size=2, allow_reuse=False, return_state=True)
        stricter = one_step(**fields, mini_batch_size=2, error_threshold=0, return_state=True)
        stricter_v1 = one_step(
            **fields, mini_batch_size=2, error_threshold=0, allowed_failed_count=0, return_state=True
        )
        assert task_states(flow_run_id(resized)) == {"uncached": "Completed"}
        assert resized.result()["mini_batches_total"] == 3
        assert task_states(flow_run_id(forced)) == {"uncached": "Completed"}
        assert forced.result()["reused"] is False
        assert forced.result()["workers_started"] == 1
        assert task_states(flow_run_id(stricter)) == {"uncached": "Completed"}
        assert task_states(flow_run_id(stricter_v1)) == {"uncached": "Completed"}  # the v1 name of a threshold

    def test_a_new_output_folder_runs_the_task_and_the_step_reuses_the_earlier_output(
        self, write_script, make_files, tmp_path
    ):
        fields = dict(
            entry_script=str(write_script(ECHO)),
            inputs=str(make_files(6)),
            mini_batch_size=3,
            process_count_per_node=1,
            name="moved",
        )
        first = one_step(**fields, output=str(tmp_path / "a"), return_state=True).result()
        moved = one_step(**fields, output=str(tmp_path / "b"), return_state=True)
        summary = moved.result()
        assert task_states(flow_run_id(moved)) == {"moved": "Completed"}
        assert (summary["reused"], summary["workers_started"], summary["mini_batches_reused"]) == (True, 0, 2)
        assert summary["output_file"] == str(tmp_path / "b" / "parallel_run_step.txt")
        assert output_lines(summary) == output_lines(first)
        (progress,) = artifacts(flow_run_id(moved), "moved-progress")
        assert progress.data == 100.0
        assert "Succeeded (reused)" in progress.description


FAIL_ONCE_ON_F3 = """
    from pathlib import Path

    HERE = Path(__file__).parent

    def init():
        pass

    def run(mini_batch):
        name = Path(mini_batch[0]).name
        flag = HERE / "fail-once"
        if name == "f0003.txt" and flag.exists():
            flag.unlink()
            raise RuntimeError("transient failure on f0003")
        with open(HERE / "calls.log", "a") as log:
            log.write(name + "\\n")
        return [open(path).read().strip() for path in mini_batch]
"""


class TestRetry:
    def test_a_retried_task_resumes_the_step(self, write_script, make_files, tmp_path):
        script, data = write_script(FAIL_ONCE_ON_F3), make_files(6)
        (tmp_path / "fail-once").touch()

        @flow
        def retried():
            return parallel_run.with_options(retries=1)(
                entry_script=str(script),
                inputs=str(data),
                mini_batch_size=1,
                process_count_per_node=1,
                run_max_try=1,
                mini_batch_error_threshold=0,
                name="resumes",
                return_state=True,
            )

        state = retried()
        summary = state.result()
        # One worker takes mini-batches in order: 0-2 were committed before 3 failed the first attempt
        # (4 may have been in flight when the step stopped; it is unfinished, so it runs again).
        assert summary["status"] == "Succeeded"
        # One run across both tries: its own earlier results are not "reused", and none ran twice.
        assert (summary["mini_batches_succeeded"], summary["mini_batches_reused"]) == (6, 0)
        calls = (tmp_path / "calls.log").read_text().split()
        assert [calls.count(f"f{i:04d}.txt") for i in range(3)] == [1, 1, 1]
        assert calls.count("f0003.txt") == 1  # its failed attempt raised before logging
        assert sorted(output_lines(summary), key=int) == [str(i) for i in range(6)]
        assert summary["run_id"].endswith(str(state.state_details.task_run_id))
        published = sorted(artifacts(flow_run_id(state), "resumes-summary"), key=lambda a: a.created)
        assert [a.description.split(": ")[1] for a in published] == ["Failed", "Succeeded"]  # one per attempt


def test_secret_values_stay_out_of_the_result_and_the_artifacts(write_script, make_files):
    script = write_script(
        """
        import os
        def run(mini_batch):
            return [os.environ["TOKEN"][:3] for _ in mini_batch]
        """
    )
    state = one_step(
        entry_script=str(script),
        inputs=str(make_files(2)),
        environment_variables={"TOKEN": "tok-3f9a-secret-value"},
        name="secretive",
        return_state=True,
    )
    summary = state.result()
    assert output_lines(summary) == ["tok", "tok"]  # the worker had the value
    assert summary["config"]["environment_variables"] == {"TOKEN": "***"}
    published = [a for key in ("secretive-summary", "secretive-progress") for a in artifacts(flow_run_id(state), key)]
    assert published
    assert not [a for a in published if "secret-value" in f"{a.data} {a.description}"]
