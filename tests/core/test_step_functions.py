"""`ParallelRunStep(run=..., init=...)`: functions written next to the step (a notebook, a script, this
test module, which no worker can import) run in fresh worker processes, in this process's driver and in
a detached one."""

from pathlib import Path

import pytest

from parallel_steps import ConfigError, ParallelRunStep

_state: dict = {}


def set_up() -> None:
    _state["prefix"] = "seen"


def label(mini_batch):
    return [f"{_state['prefix']}:{Path(p).read_text().strip()}" for p in mini_batch]


def test_functions_run_in_the_workers_with_their_init(make_files):
    step = ParallelRunStep(
        name="functions",
        inputs=[str(make_files(5))],
        run=label,
        init=set_up,
        mini_batch_size=2,
        process_count_per_node=2,
    )
    summary = step.run()
    assert (summary["status"], summary["mini_batches_total"]) == ("Succeeded", 3)
    assert Path(summary["output_file"]).read_text().split() == [f"seen:{i}" for i in range(5)]


def test_a_submitted_step_ships_its_functions_to_the_detached_driver(make_files):
    step = ParallelRunStep(name="functions", inputs=[str(make_files(3))], run=label, init=set_up, mini_batch_size=1)
    summary = step.submit().wait(timeout=120)
    assert summary["status"] == "Succeeded"
    assert Path(summary["output_file"]).read_text().split() == ["seen:0", "seen:1", "seen:2"]


def test_an_entry_script_and_a_run_function_are_one_too_many(make_files, write_script):
    step = ParallelRunStep(
        entry_script=str(write_script("def run(mb):\n    return mb\n")), inputs=[str(make_files(1))], run=label
    )
    with pytest.raises(ConfigError, match=r"^entry_script: is not run when entry functions"):
        step.run()
