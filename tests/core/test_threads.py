"""Each worker's math libraries get a share of the node's CPUs (the thread budget), unless the step says how
many threads (`threads_per_worker`) or the step's or the caller's environment sets the variable itself."""

import os

import pytest

from parallel_steps import ConfigError, ParallelRunConfig, run_step

from .conftest import cli, output_lines

THREADS = """
import os

def run(mini_batch):
    names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    return [" ".join(f"{name}={os.environ.get(name)}" for name in names) for _ in mini_batch]
"""
VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@pytest.fixture(autouse=True)
def no_thread_variables(monkeypatch):
    for name in (*VARIABLES, "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def seen(make_files, write_script, **fields) -> set[str]:
    config = ParallelRunConfig(
        entry_script=str(write_script(THREADS)), inputs=[str(make_files(6))], mini_batch_size=1, **fields
    )
    return set(output_lines(run_step(config)))


def test_each_worker_gets_its_share_of_the_cpus(make_files, write_script):
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert seen(make_files, write_script, process_count_per_node=2) == {
        " ".join(f"{name}={share}" for name in VARIABLES)
    }


def test_threads_per_worker_is_what_every_worker_gets(make_files, write_script):
    assert seen(make_files, write_script, process_count_per_node=2, threads_per_worker=3) == {
        "OMP_NUM_THREADS=3 MKL_NUM_THREADS=3 OPENBLAS_NUM_THREADS=3"
    }


def test_a_variable_the_step_or_the_caller_sets_wins(make_files, write_script, monkeypatch):
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    lines = seen(
        make_files,
        write_script,
        process_count_per_node=1,
        threads_per_worker=2,
        environment_variables={"OMP_NUM_THREADS": "5"},
    )
    assert lines == {"OMP_NUM_THREADS=5 MKL_NUM_THREADS=7 OPENBLAS_NUM_THREADS=2"}


def test_the_runs_log_says_how_many_threads_each_worker_gets(tmp_path, make_files, write_script):
    step = tmp_path / "step.yaml"
    step.write_text(
        f"entry_script: {write_script(THREADS)}\ninputs: [{make_files(2)}]\nprocess_count_per_node: 2\n"
        "threads_per_worker: 1\nrun_root: runs\n"
    )
    result = cli("run", str(step), "--json")
    assert result.returncode == 0, result.stderr
    logs = "".join(path.read_text() for path in (tmp_path / "runs").rglob("master_role.txt"))
    assert "2 worker(s) per node, threads per worker: OMP_NUM_THREADS=1, MKL_NUM_THREADS=1" in logs


@pytest.mark.parametrize("value", [0, -2, "many"])
def test_a_thread_count_that_is_not_a_positive_integer_is_one_line_naming_the_field(value):
    with pytest.raises(ConfigError) as error:
        ParallelRunConfig(entry_script="score.py", inputs=["/in"], threads_per_worker=value)
    assert str(error.value).startswith("threads_per_worker: ")
    assert "\n" not in str(error.value)
