"""Where a worker's time went: attempts one after another add up; attempts in flight together (an `async def
run`) count the time any of them ran once, so shares never pass the worker's life."""

import pytest

from parallel_steps.driver.worker_time import WorkerTime


def shares(attempts: list[tuple[float, float, float]], alive: float) -> dict:
    """One worker, ready at 0 and ended at `alive`, with (started, duration, input_s) attempts in report order."""
    times = WorkerTime()
    times.ready("w", 0.0)
    for started, duration, input_s in attempts:
        times.attempt("w", started, duration, input_s)
    times.ended("w", alive)
    times.end_all(alive)
    return times.summary()


def test_attempts_one_after_another_add_up():
    summary = shares([(0.0, 4.0, 1.0), (4.0, 4.0, 0.0)], alive=10.0)
    assert summary["workers"]["w"] == {"alive_s": 10.0, "run_s": 7.0, "input_s": 1.0, "idle_s": 2.0}


def test_attempts_in_flight_together_count_their_span_once():
    """Four overlapping 4 s attempts started a second apart, over 7 s: busy 7 s, not 16."""
    summary = shares([(float(i), 4.0, 0.0) for i in range(4)], alive=10.0)
    assert summary["workers"]["w"]["run_s"] == pytest.approx(7.0)
    assert summary["run_share"] == pytest.approx(0.7)


def test_a_short_attempt_inside_a_long_one_adds_nothing():
    summary = shares([(0.0, 8.0, 0.0), (2.0, 1.0, 0.0)], alive=10.0)
    assert summary["workers"]["w"]["run_s"] == pytest.approx(8.0)
