"""`@task.parallel_run`: the decorated function is run(mini_batch), shipped to fresh worker
processes with cloudpickle; call and expand keywords are config fields."""

import subprocess
import sys
from pathlib import Path

import pytest
from airflow.sdk import DAG, task

from parallel_steps import ConfigError
from parallel_steps.airflow.decorators import _ParallelRunDecoratedOperator, parallel_run_task
from parallel_steps.worker.shipping import dumps_callables

_state: dict = {}


def set_up() -> None:
    _state["prefix"] = "seen"


def operator_of(xcom_arg) -> _ParallelRunDecoratedOperator:
    return xcom_arg.operator


def test_the_decorator_is_registered_as_task_parallel_run():
    assert task.parallel_run is parallel_run_task


def test_a_function_from_the_test_module_runs_in_workers_with_its_init(make_files, context):
    with DAG("decorated", schedule=None):

        @task.parallel_run(init=set_up, mini_batch_size=3, process_count_per_node=2)
        def label(mini_batch):
            return [f"{_state['prefix']}:{Path(p).read_text().strip()}" for p in mini_batch]

        op = operator_of(label(inputs=str(make_files(7))))
    assert op.task_id == "label"
    assert op.custom_operator_name == "@task.parallel_run"
    summary = op.execute(context(task_id="label"))
    assert summary["status"] == "Succeeded"
    assert summary["mini_batches_total"] == 3
    assert Path(summary["output_file"]).read_text().split() == [f"seen:{i}" for i in range(7)]


def test_call_keywords_override_the_decorators_and_are_templated(make_files, context):
    with DAG("decorated", schedule=None):

        @task.parallel_run(inputs="nowhere", mini_batch_size=100, process_count_per_node=2)
        def echo(mini_batch):
            return mini_batch

        op = operator_of(echo(inputs=str(make_files(4)), mini_batch_size="{{ params.size }}"))
    ctx = context(params={"size": "1"}, task_id="echo")
    op.render_template_fields(ctx)
    assert op.execute(ctx)["mini_batches_total"] == 4


def test_positional_or_unknown_call_arguments_are_rejected():
    with DAG("decorated", schedule=None):

        @task.parallel_run
        def echo(mini_batch):
            return mini_batch

        with pytest.raises(TypeError, match="config fields as keywords only"):
            echo("data")
        with pytest.raises(ConfigError, match=r"^mini_batch: is not a configuration field"):
            echo(mini_batch=5)


def test_expand_maps_whole_steps_over_inputs():
    with DAG("decorated", schedule=None):

        @task.parallel_run(mini_batch_size=2)
        def echo(mini_batch):
            return mini_batch

        mapped = echo.expand(inputs=["a", "b", "c"]).operator
        with pytest.raises(TypeError, match="unexpected keyword argument 'input'"):
            echo.expand(input=["a"])
    assert mapped.operator_class is _ParallelRunDecoratedOperator
    unmapped = mapped.unmap({"op_kwargs": {"inputs": "b"}})
    assert (unmapped.inputs, unmapped.mini_batch_size) == ("b", 2)


def test_functions_the_workers_cannot_import_travel_by_value():
    """A fresh interpreter (a worker) rebuilds a test-module function, which it could not import."""
    payload = dumps_callables({"init": set_up, "run": len, "shutdown": None})
    code = (
        "import pickle, sys; f = pickle.loads(sys.stdin.buffer.read()); f['init'](); "
        "print(f['run']([1, 2]), f['init'].__globals__['_state'])"
    )
    result = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split(maxsplit=1) == ["2", "{'prefix': 'seen'}\n"]


def test_a_callable_that_cannot_be_pickled_is_named():
    import threading

    lock = threading.Lock()

    def run(mini_batch):
        with lock:
            return mini_batch

    with pytest.raises(ConfigError, match=r"^run: cannot be shipped to the workers with cloudpickle"):
        dumps_callables({"init": None, "run": run, "shutdown": None})


def test_a_decorated_step_over_partitions_records_an_event_per_partition_and_adds_its_check(tmp_path, context):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        (tmp_path / "data" / day).mkdir(parents=True)
        for name in ("a.txt", "b.txt"):
            (tmp_path / "data" / day / name).write_text(f"{day}/{name}\n")
    (tmp_path / "data" / "2026-01-02" / "bad.txt").write_text("unreadable\n")
    with DAG("decorated_partitions", schedule=None) as dag:

        @task.parallel_run(
            inputs=f"{tmp_path}/data/{{partition}}",
            partitions=["2026-01-*"],
            output=str(tmp_path / "out"),
            mini_batch_size=1,
            process_count_per_node=1,
            run_max_try=1,
        )
        def score(mini_batch):
            if any(path.endswith("bad.txt") for path in mini_batch):
                raise ValueError("cannot score")
            return [Path(path).read_text().strip() for path in mini_batch]

        op = operator_of(score())
    assert dag.get_task("score_partitions").upstream_task_ids == {"score"}

    events = OutletEventAccessors()
    summary = op.execute({**context(task_id="score"), "outlet_events": events})

    assert summary["partitions_failed"] == ["2026-01-02"]  # the task itself succeeds: the others' events go out
    [outlet] = op.outlets
    assert outlet.uri == (tmp_path / "out").as_uri()
    assert events[outlet].partition_keys == {"2026-01-01", "2026-01-03"}
    facts = events[outlet].extra["partitions"]
    assert sorted(facts) == ["2026-01-01", "2026-01-03"]
    assert facts["2026-01-03"]["rows_written"] == 2
    assert (tmp_path / "out" / "2026-01-03" / "parallel_run_step.txt").read_text().split() == [
        "2026-01-03/a.txt",
        "2026-01-03/b.txt",
    ]
