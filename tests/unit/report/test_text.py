"""The one progress text (the CLI, a task log and a Prefect artifact show the same), and the throttle
that keeps a log to one line per interval, against a fake clock."""

from __future__ import annotations

from parallel_steps.report.text import Throttle, end_line, items_and_rate, progress_line

SNAPSHOT = {
    "status": "Running",
    "mini_batches_done": 12,
    "mini_batches_total": 40,
    "mini_batches_succeeded": 11,
    "mini_batches_failed": 1,
    "mini_batches_reused": 0,
    "items_succeeded": 55,
    "items_failed": 5,
    "rate_per_s": 2.5,
    "eta_s": 11.2,
}


def test_the_progress_line_has_counts_items_rate_and_eta():
    assert progress_line(SNAPSHOT) == (
        "12/40 mini-batches done (11 succeeded, 1 failed, 0 reused); "
        "items 55 succeeded, 5 failed; 2.50 mini-batches/s; ETA 11 s"
    )


def test_an_eta_not_known_yet_says_so():
    assert items_and_rate({**SNAPSHOT, "eta_s": None, "rate_per_s": None}).endswith("0.00 mini-batches/s; ETA unknown")


def test_a_sparse_snapshot_still_formats():
    assert progress_line({"status": "Running"}).startswith("0/0 mini-batches done (0 succeeded, 0 failed, 0 reused)")


def test_the_end_line_counts_what_is_done_and_says_how_it_ended():
    summary = {**SNAPSHOT, "status": "Failed", "status_reason": "error_threshold exceeded", "reused": False}
    assert end_line(summary) == "12/40 mini-batches done; Failed: error_threshold exceeded"
    reused = {"mini_batches_succeeded": 4, "mini_batches_failed": 0, "mini_batches_total": 4, "reused": True}
    assert end_line({**reused, "status": "Succeeded", "status_reason": "reused"}) == (
        "4/4 mini-batches done; Succeeded (reused): reused"
    )


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_throttle_lets_the_first_line_through_then_one_per_interval():
    clock = Clock()
    throttle = Throttle(10.0, clock)
    assert throttle.due(SNAPSHOT)
    clock.now += 9.9
    assert not throttle.due(SNAPSHOT)
    clock.now += 0.1
    assert throttle.due(SNAPSHOT)


def test_the_throttle_always_lets_the_last_line_through():
    clock = Clock()
    throttle = Throttle(10.0, clock)
    throttle.due(SNAPSHOT)
    clock.now += 1
    assert throttle.due({**SNAPSHOT, "mini_batches_done": 40})
