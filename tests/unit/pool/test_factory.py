"""The thread-count variables each worker gets: `threads_per_worker`, else (local backend) its share of the
node's CPUs; Ray gives an actor its own; a variable the step or this process sets is left alone."""

from __future__ import annotations

import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.host import THREAD_VARIABLES, cpu_count, thread_budget
from parallel_steps.pool.factory import thread_environment


@pytest.fixture(autouse=True)
def no_thread_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def config(**fields: object) -> ParallelRunConfig:
    return ParallelRunConfig(entry_script="score.py", inputs=["/in"], **fields)  # type: ignore[arg-type]


def test_the_budget_shares_the_cpus_and_never_falls_to_zero() -> None:
    assert thread_budget(1) == cpu_count()
    assert thread_budget(cpu_count() * 4) == 1


def test_local_workers_get_their_share_of_the_cpus() -> None:
    assert thread_environment(config(), 1, {}) == dict.fromkeys(THREAD_VARIABLES, str(cpu_count()))


def test_ray_actors_keep_what_ray_gives_them_unless_the_step_says() -> None:
    assert thread_environment(config(backend="ray"), 2, {}) == {}
    assert thread_environment(config(backend="ray", threads_per_worker=4), 2, {})["OMP_NUM_THREADS"] == "4"


def test_the_steps_and_the_callers_variables_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MKL_NUM_THREADS", "8")
    given = thread_environment(config(threads_per_worker=2), 2, {"OMP_NUM_THREADS": "3"})
    assert "OMP_NUM_THREADS" not in given
    assert "MKL_NUM_THREADS" not in given
    assert given["OPENBLAS_NUM_THREADS"] == "2"
