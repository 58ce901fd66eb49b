"""The driver's policies, against a scripted fake pool: retries, fault policies, thresholds, the init()
policy, lost workers, cancels, progress and events, the no-progress timeout.

A real `Driver` with a real ledger, run logs, `Reporter` and `Counters`; only the pool is fake.
`FakePool` keeps the worker pool contract (pool/base.py; the same contract the pool contract
suite, tests/contract/test_pool_contract.py, checks on the real pools) and plays a table of what each
attempt of each mini-batch does. Time is a fake clock the pool moves forward while it "waits",
so the time-based policies are exact and nothing sleeps.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.control import Cancel
from parallel_steps.driver import Driver, Reporter, dispatch, health, progress, termination
from parallel_steps.driver import cancel as cancel_watch
from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool.base import PoolSettings, WorkerPool
from parallel_steps.protocol import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    LossReason,
    Lost,
    Outcome,
    Ready,
    WorkerInfo,
)
from parallel_steps.store.ledger import Ledger
from parallel_steps.store.logs import RunLogs
from parallel_steps.store.runs import request_cancel
from parallel_steps.summary import Counters, RunSummary

# What one attempt does -----------------------------------------------------------------------------

_UNSET = object()


@dataclass(frozen=True)
class Ok:
    """run() returns `rows` (default: one per item) after `takes` seconds (fake time)."""

    rows: int | None = None
    takes: float = 1.0
    hang_timeout: Any = _UNSET  # else: the entry script sets it as the attempt starts (HangTimeoutChanged)


@dataclass(frozen=True)
class Fails:
    """run() raises: the error text the worker sends back."""

    error: str
    takes: float = 1.0


@dataclass(frozen=True)
class Lose:
    """The worker is lost while it runs the attempt."""

    reason: LossReason = LossReason.CRASHED
    exit_code: int | None = 1
    takes: float = 1.0
    detail: str = "worker exited with exit code 1"


def traceback_of(error: str) -> str:
    return f'Traceback (most recent call last):\n  File "score.py", line 3, in run\n{error}\n'


# The fake clock and pool -----------------------------------------------------------------------------


class Clock:
    """Stands in for the `time` module of the driver's modules: time moves only when the pool waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now


@dataclass
class _Running:
    mini_batch: MiniBatch
    attempt: int
    does: Ok | Fails | Lose
    started: float | None = None


@dataclass
class _FakeWorker:
    info: WorkerInfo
    ready: bool = False
    queue: collections.deque[_Running] = field(default_factory=collections.deque)


class FakePool(WorkerPool):
    """A worker pool that plays `attempts`: mini-batch index -> what its 1st, 2nd, ... attempt does
    (beyond the list, or not listed: `Ok()`). `init_error(worker)` is the error of a worker whose
    init() fails (None: it starts). `on_submit(mini_batch, attempt)` is called on each submit."""

    def __init__(
        self,
        clock: Clock,
        attempts: dict[int, list[Ok | Fails | Lose]],
        nodes: int = 1,
        per_node: int = 2,
        init_error: Callable[[WorkerInfo], str | None] = lambda worker: None,
        on_submit: Callable[[MiniBatch, int], None] = lambda mini_batch, attempt: None,
    ):
        super().__init__(PoolSettings(nodes, per_node, make_spec=None, environment={}, gpu_ids=[]))
        self.clock, self.attempts, self.init_error, self.on_submit = clock, attempts, init_error, on_submit
        self._workers: dict[str, _FakeWorker] = {}
        self._news: list[Event] = []  # reported by the next next_events
        self._pids = itertools.count(100)
        self.started: list[WorkerInfo] = []
        self.submitted: list[tuple[str, int, int]] = []  # (worker id, mini-batch index, attempt)

    def start(self) -> None:
        for node in range(self.settings.node_count):
            for slot in range(self.settings.process_count_per_node):
                self._spawn(node, slot)

    def _spawn(self, node: int, slot: int) -> None:
        info = self._new_worker(node, slot)
        info = WorkerInfo(info.id, info.node_index, info.node_id, info.process_name, info.slot, pid=next(self._pids))
        self.started.append(info)
        error = self.init_error(info)
        if error:
            self._news.append(InitFailed(info, error))
        else:
            self._workers[info.id] = _FakeWorker(info, ready=True)
            self._news.append(Ready(info))

    def replace(self, worker: WorkerInfo) -> None:
        self._spawn(worker.node_index, worker.slot)

    def submit(self, worker: WorkerInfo, mini_batch: MiniBatch, attempt: int, timeout: float | None) -> None:
        handle = self._workers.get(worker.id)
        if handle is None:
            return  # lost since the driver last looked
        assert handle.ready, f"{worker.id} is not ready"
        self.submitted.append((worker.id, mini_batch.index, attempt))
        plan = self.attempts.get(mini_batch.index, [])
        handle.queue.append(_Running(mini_batch, attempt, plan[attempt - 1] if attempt <= len(plan) else Ok()))
        self._start_head(handle)
        self.on_submit(mini_batch, attempt)

    def next_events(self, timeout: float) -> list[Event]:
        """What is in; else the clock moves to the next end of an attempt (at most `timeout` on)."""
        if not self._news and not self._due():
            ends = [self._end(h) for h in self._workers.values() if h.queue]
            self.clock.now = min(self.clock.now + timeout, *ends) if ends else self.clock.now + timeout
        for handle in sorted(self._due(), key=self._end):
            self._finish(handle)
        events, self._news = self._news, []
        return events

    def close(self, grace: float | None = None) -> None:
        self._workers.clear()

    def _start_head(self, handle: _FakeWorker) -> None:
        head = handle.queue[0] if handle.queue else None
        if head is None or head.started is not None:
            return
        head.started = self.clock.now
        if isinstance(head.does, Ok) and head.does.hang_timeout is not _UNSET:
            self._news.append(HangTimeoutChanged(handle.info, head.does.hang_timeout))

    def _end(self, handle: _FakeWorker) -> float:
        head = handle.queue[0]
        return head.started + head.does.takes

    def _due(self) -> list[_FakeWorker]:
        return [h for h in self._workers.values() if h.queue and self._end(h) <= self.clock.now]

    def _finish(self, handle: _FakeWorker) -> None:
        head, info = handle.queue.popleft(), handle.info
        does, index = head.does, head.mini_batch.index
        if isinstance(does, Lose):  # the rest of its queue is not reported: the driver sends it elsewhere
            del self._workers[info.id]
            self._news.append(Lost(info, index, does.reason, does.exit_code, does.detail))
            return
        started = self.clock.time() - does.takes
        if isinstance(does, Ok):
            rows = head.mini_batch.items if does.rows is None else does.rows
            outcome = Outcome(ok=True, items=None, returned=rows, started=started, duration=does.takes)
        else:
            outcome = Outcome(
                ok=False, items=None, error=traceback_of(does.error), started=started, duration=does.takes
            )
        self._news.append(Finished(info, index, outcome))
        self._start_head(handle)


# Running the driver -----------------------------------------------------------------------------------


@dataclass
class Result:
    status: str
    reason: str
    counters: Counters
    pool: FakePool
    ledger: Ledger
    logs: RunLogs
    events: list[dict[str, Any]]
    snapshots: list[RunSummary]

    def row(self, index: int) -> dict[str, Any]:
        return self.ledger.rows(index)[0]

    def outcomes(self, index: int) -> list[str]:
        """Every attempt's outcome, in order (failed ones from the attempts table, then the success)."""
        failed = [a["outcome"] for a in self.ledger.attempts(index)]
        return failed + (["succeeded"] if self.row(index)["state"] == "succeeded" else [])

    def master_role(self) -> str:
        return self.logs.master_role.read_text()

    def kinds(self) -> list[str]:
        return [event["type"] for event in self.events]


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    for module in (dispatch, cancel_watch, termination, health, progress):
        monkeypatch.setattr(module, "time", clock)
    return clock


def mini_batches(count: int, items: int = 1) -> list[MiniBatch]:
    return [MiniBatch(i, "files", (f"data/f{i:03d}.txt",), f"fp{i}", 10, items) for i in range(count)]


def whole_plan(ledger: Ledger, counters: Counters, plan: list[MiniBatch]) -> Iterator[MiniBatch]:
    """The plan written before the driver starts (a resume, or a run with something to reuse)."""
    ledger.add([(mb, None, None) for mb in plan])
    counters.mini_batches_total = len(plan)
    return iter(plan)


def streamed_plan(ledger: Ledger, counters: Counters, plan: list[MiniBatch]) -> Callable[[], list[MiniBatch]]:
    """The plan written while the driver runs, one mini-batch per call of the driver's `write_plan`, as
    plan.RunPlan.write_next_chunk writes a chunk: `planning` until the end."""
    counters.planning = True
    rest = iter(plan)

    def write_next() -> list[MiniBatch]:
        mb = next(rest, None)
        if mb is None:
            counters.planning = False
            return []
        ledger.add([(mb, None, None)], descriptors=False)
        counters.mini_batches_total += 1
        return [mb]

    return write_next


@pytest.fixture
def drive(tmp_path, clock):
    """`drive(plan, attempts, **fields)`: run a real Driver over the plan on a FakePool; fields are
    configuration fields, or FakePool's `nodes`, `per_node`, `init_error`, `on_submit`, or `cancel`,
    `streamed` (the plan streams in)."""
    opened = []

    def run(
        plan: list[MiniBatch],
        attempts: dict[int, list[Ok | Fails | Lose]] | None = None,
        *,
        cancel: Cancel | None = None,
        streamed: bool = False,
        nodes: int = 1,
        per_node: int = 2,
        init_error: Callable[[WorkerInfo], str | None] = lambda worker: None,
        on_submit: Callable[[MiniBatch, int], None] = lambda mini_batch, attempt: None,
        **fields: Any,
    ) -> Result:
        config = ParallelRunConfig(name="driver-test", entry_script="score.py", **fields)
        run_dir = tmp_path / "run"
        logs, ledger, counters = RunLogs(run_dir), Ledger(run_dir / "ledger.sqlite"), Counters()
        opened.append(ledger)
        log = logs.master_logger("driver-test")
        events, snapshots = [], []
        reporter = Reporter(logs, log, on_progress=snapshots.append, on_event=events.append)
        pool = FakePool(clock, attempts or {}, nodes, per_node, init_error, on_submit)
        pending, write_plan = (
            (iter(()), streamed_plan(ledger, counters, plan))
            if streamed
            else (whole_plan(ledger, counters, plan), None)
        )
        with pool:
            driver = Driver(
                config.driver_policy(),
                ledger,
                pool,
                pending,
                counters,
                reporter,
                termination.Termination(cancel or threading.Event(), config.termination_grace, run_dir),
                write_plan,
            )
            status, reason = driver.run()
        ledger.commit()
        logs.close(log)
        return Result(status, reason, counters, pool, ledger, logs, events, snapshots)

    yield run
    for ledger in opened:
        ledger.close()


# Retries and fault policies --------------------------------------------------------------------------


def test_a_failing_mini_batch_is_retried_up_to_run_max_try_and_every_attempt_is_counted(drive):
    result = drive(
        mini_batches(4),
        {1: [Fails("ValueError: bad row")] * 3, 2: [Fails("OSError: disk")]},
        run_max_try=3,
    )

    assert result.status == "Succeeded"
    assert result.reason.startswith("1 items in 1 failed mini-batches were within the thresholds. First errors: ")
    assert result.outcomes(1) == ["failed", "failed", "failed"]
    assert result.outcomes(2) == ["failed", "succeeded"]
    assert (result.row(1)["state"], result.row(1)["attempts"], result.row(1)["error"]) == (
        "failed",
        3,
        "ValueError: bad row",
    )
    assert (result.row(2)["state"], result.row(2)["attempts"]) == ("succeeded", 2)
    counters = result.counters
    assert (counters.attempts_retried, counters.mini_batches_succeeded, counters.mini_batches_failed) == (3, 3, 1)
    assert (counters.items_succeeded, counters.items_failed) == (3, 1)
    assert sorted(attempt for _, index, attempt in result.pool.submitted if index == 1) == [1, 2, 3]
    csv_rows = result.logs.processed.read_text().splitlines()
    assert len(csv_rows) == 1 + 3 + 4  # the header, three successes, four failed attempts


def test_never_retries_nothing(drive):
    result = drive(
        mini_batches(3), {0: [Fails("ConnectionResetError: connection reset by peer")]}, fault_tolerant_policy="Never"
    )

    assert result.outcomes(0) == ["failed"]
    assert result.counters.attempts_retried == 0


def test_exit_code_and_error_msg_retries_only_what_it_is_told_and_transient_losses(drive):
    attempts = {
        0: [Fails("ConnectionResetError: connection reset by peer")],  # retryable_errors
        1: [Fails("KeyError: 'label_17'")],  # not retryable
        2: [Lose(exit_code=3)],  # retryable_exit_codes
        3: [Lose(exit_code=1)],  # not retryable
        4: [Lose(LossReason.TIMED_OUT, exit_code=-9, detail="run() exceeded 60 s on mini-batch 4")],  # untold
        5: [Lose(LossReason.OUT_OF_MEMORY, exit_code=-9, detail="OutOfMemory: worker used 900 MB")],  # untold
        6: [Fails("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")],  # a built-in pattern
    }
    result = drive(
        mini_batches(7),
        attempts,
        fault_tolerant_policy="ExitCodeAndErrorMsg",
        retryable_errors=["connection reset"],
        retryable_exit_codes=[3],
    )

    assert result.outcomes(0) == ["failed", "succeeded"]
    assert result.outcomes(1) == ["failed"]
    assert result.outcomes(2) == ["crashed", "succeeded"]
    assert result.outcomes(3) == ["crashed"]
    assert result.outcomes(4) == ["timed_out", "succeeded"]
    assert result.outcomes(5) == ["out_of_memory", "succeeded"]
    assert result.outcomes(6) == ["failed", "succeeded"]
    assert result.counters.attempts_retried == 5
    assert (result.row(3)["exit_code"], result.row(3)["error"]) == (1, "worker exited with exit code 1")
    assert result.ledger.attempts(4)[0]["error"] == "run() exceeded 60 s on mini-batch 4"


def test_a_lost_workers_queue_goes_to_other_workers_without_counting_an_attempt(drive):
    """Short mini-batches: each worker holds two. Worker process000 is lost with mini-batch 0; mini-batch 2,
    queued behind it, runs elsewhere as attempt 1; the lost one runs again as attempt 2."""
    result = drive(mini_batches(6), {0: [Lose(takes=0.01)]}, per_node=2)

    lost, other, replacement = "node0/process000", "node0/process001", "node0/process002"
    tries = {index: [(w, a) for w, i, a in result.pool.submitted if i == index] for index in (0, 2)}
    assert tries[2] == [(lost, 1), (replacement, 1)]
    assert tries[0] == [(lost, 1), (replacement, 2)]
    assert result.pool.submitted[:4] == [(lost, 0, 1), (other, 1, 1), (lost, 2, 1), (other, 3, 1)]
    assert result.outcomes(0) == ["crashed", "succeeded"]
    assert (result.row(0)["attempts"], result.row(2)["attempts"]) == (2, 1)
    assert result.counters.attempts_retried == 1
    assert result.counters.workers_started == 3
    replaced = [e for e in result.events if e["type"] == "worker_replaced"]
    assert [(e["worker"], e["reason"]) for e in replaced] == [(lost, "crashed")]
    assert (
        "node0/process000 lost (crashed): worker exited with exit code 1; starting a replacement"
        in result.master_role()
    )


# Thresholds ----------------------------------------------------------------------------------------------


def test_error_threshold_counts_failed_items_including_items_a_run_did_not_return(drive):
    """Mini-batch 0 returns 1 row of its 3 items: 2 items failed; one more failed item exceeds 2."""
    plan = mini_batches(6, items=3)
    result = drive(plan, {0: [Ok(rows=1)], 3: [Fails("ValueError: bad row")]}, run_max_try=1, error_threshold=2)

    assert result.status == "Failed"
    assert result.reason.startswith("error_threshold 2 exceeded: 5 items failed. First errors: ValueError: bad row")
    assert "threshold_exceeded" in result.kinds()
    assert "mini-batch 0 returned 1 of 3 items; 2 counted as failed" in result.master_role()


def test_mini_batch_error_threshold(drive):
    result = drive(
        mini_batches(8), {i: [Fails("OSError: disk")] for i in (1, 2, 3)}, run_max_try=1, mini_batch_error_threshold=1
    )

    assert result.status == "Failed"
    assert result.reason.startswith("mini_batch_error_threshold 1 exceeded: 2 mini-batches failed")
    assert result.counters.done < 8


@pytest.mark.parametrize("streamed", [True, False])
def test_allowed_failed_percent_is_judged_once_the_plan_is_complete(drive, streamed):
    """3 of 10 fail (30% > 20%). While the plan streams in, the first failure would be 100% of what is
    planned: the failures are judged against the whole plan, once it is written (the driver writes it ahead
    in time it would wait, so here before the run ends). With the whole plan known, it fails as soon as 3 failed."""
    plan = mini_batches(10)
    result = drive(
        plan,
        {i: [Fails("OSError: disk")] for i in (0, 1, 2)},
        run_max_try=1,
        allowed_failed_percent=20,
        streamed=streamed,
        per_node=1,
    )

    assert result.status == "Failed"
    assert result.reason.startswith("allowed_failed_percent 20 exceeded: 3 of 10 mini-batches failed")  # the whole plan
    if not streamed:
        assert result.counters.done == 3


def test_allowed_failed_percent_within_the_limit_succeeds(drive):
    result = drive(
        mini_batches(10),
        {i: [Fails("OSError: disk")] for i in (0, 1)},
        run_max_try=1,
        allowed_failed_percent=20,
        streamed=True,
    )

    assert result.status == "Succeeded"
    assert result.counters.mini_batches_failed == 2


def test_max_tolerated_failure_rate_waits_for_ten_finished_mini_batches(drive):
    """Every other mini-batch fails: 50% from the start, but the rate is judged from 10 finished on."""
    result = drive(
        mini_batches(40),
        {i: [Fails("OSError: disk")] for i in range(1, 40, 2)},
        run_max_try=1,
        max_tolerated_failure_rate=0.3,
        per_node=1,
    )

    assert result.status == "Failed"
    assert result.reason.startswith("max_tolerated_failure_rate 0.3 exceeded: 5 of 10 finished mini-batches failed")


def test_max_same_error_counts_mini_batches_not_attempts(drive):
    """Mini-batch 0 fails the same way three times (one mini-batch); the second mini-batch that fails
    with an error of the same signature (numbers and quoted names masked) stops the job."""
    attempts = {
        0: [Fails("ValueError: cannot parse 'f000.txt' at byte 17")] * 3,
        5: [Fails("ValueError: cannot parse 'f005.txt' at byte 90")],
    }
    result = drive(mini_batches(8), attempts, max_same_error=2, per_node=1)

    assert result.status == "Failed"
    assert result.reason.startswith(
        "max_same_error 2 reached: the same error failed 2 mini-batches: ValueError: cannot parse 'f000.txt' "
        "at byte 17 (first in mini-batch 0 on node0/process000 (logs/user/error/node0/process000.txt))"
    )
    assert result.outcomes(0) == ["failed", "failed", "failed"]


# The init() policy -------------------------------------------------------------------------------------------


def test_a_node_whose_workers_fail_init_stops_after_three_times_its_process_count(drive):
    """Every worker on node0 fails init(); node0 stops after 3 x 2 failures, the job runs on node1."""
    result = drive(
        mini_batches(6),
        nodes=2,
        per_node=2,
        init_error=lambda worker: traceback_of("RuntimeError: no GPU") if worker.node_index == 0 else None,
    )

    assert result.status == "Succeeded"
    started_on_node0 = [w.process_name for w in result.pool.started if w.node_index == 0]
    # 2 at the start, and a replacement for each of the first 5 failures; the one after the 6th fails too
    assert started_on_node0 == [f"process{i:03d}" for i in range(7)]
    assert result.counters.init_failures == 7
    assert result.counters.workers_started == 2 + 2 + 5
    assert {w.split("/")[0] for w, _, _ in result.pool.submitted} == {"node1"}
    log = result.master_role()
    assert "node0/process000 init() failed: RuntimeError: no GPU" in log
    assert log.count("node node0: init() failed 6 times; no more workers start there") == 1


def test_the_job_fails_when_init_fails_on_every_node(drive):
    result = drive(
        mini_batches(3),
        nodes=2,
        per_node=1,
        init_error=lambda worker: traceback_of("ImportError: no module named torch"),
    )

    assert result.status == "Failed"
    assert result.reason == (
        "init() failed 6 times on every node; no worker could start. Last error: ImportError: no module named torch"
    )
    assert result.pool.submitted == []
    assert [r["state"] for r in result.ledger.rows()] == ["pending"] * 3


# Cancel ---------------------------------------------------------------------------------------------------


def cancel_when_submitted(cancel: Cancel, index: int, times: int = 1) -> Callable[[MiniBatch, int], None]:
    def on_submit(mini_batch: MiniBatch, attempt: int) -> None:
        if mini_batch.index == index:
            for _ in range(times):
                cancel.cancel()

    return on_submit


def test_a_cancel_starts_nothing_new_and_lets_mini_batches_in_flight_finish(drive):
    cancel = Cancel()
    result = drive(mini_batches(10), cancel=cancel, on_submit=cancel_when_submitted(cancel, 3))

    assert (result.status, result.reason) == ("Canceled", "canceled by the user")
    assert [index for _, index, _ in result.pool.submitted] == [0, 1, 2, 3]
    assert [r["state"] for r in result.ledger.rows()] == ["succeeded"] * 4 + ["pending"] * 6
    assert result.kinds()[-2:] == ["job_canceled", "job_finished"]
    assert result.events[-1]["status"] == "Canceled"


def test_a_cancel_gives_a_stuck_mini_batch_a_grace_then_stops(drive):
    cancel = Cancel()
    result = drive(
        mini_batches(4), {1: [Ok(takes=math.inf)]}, cancel=cancel, on_submit=cancel_when_submitted(cancel, 3)
    )

    assert (result.status, result.reason) == ("Canceled", "canceled by the user")
    # mini-batch 3 waits behind the stuck one on its worker: neither gets an outcome
    assert [r["state"] for r in result.ledger.rows()] == ["succeeded", "pending", "succeeded", "pending"]
    assert "canceled by the user; mini-batches in flight may finish within 10 s" in result.master_role()


def test_a_second_cancel_is_urgent_and_stops_at_once(drive):
    cancel = Cancel()
    result = drive(mini_batches(10), cancel=cancel, on_submit=cancel_when_submitted(cancel, 3, times=2))

    assert result.status == "Canceled"
    assert [index for _, index, _ in result.pool.submitted] == [0, 1, 2, 3]
    assert [r["state"] for r in result.ledger.rows()] == ["pending"] * 10  # the four in flight got no grace


def test_a_cancel_request_file_in_the_run_directory_cancels_with_its_reason(drive, tmp_path):
    def request(mini_batch: MiniBatch, attempt: int) -> None:
        if mini_batch.index == 3:
            request_cancel(tmp_path / "run", "canceled by alice from the CLI")

    result = drive(mini_batches(10), on_submit=request)

    assert (result.status, result.reason) == ("Canceled", "canceled by alice from the CLI")
    assert [index for _, index, _ in result.pool.submitted] == [0, 1, 2, 3]


# Progress and events -------------------------------------------------------------------------------------


def test_progress_snapshots_and_events_as_a_user_of_the_callbacks_sees_them(drive):
    """Ten mini-batches of 1 s on two workers; one is lost once. Snapshots come every 2 s and at the end;
    every event reaches the callback and events.jsonl alike."""
    result = drive(mini_batches(10), {4: [Lose(exit_code=-9, detail="worker exited with SIGKILL(-9)")]}, streamed=True)

    snapshots = result.snapshots
    assert len(snapshots) >= 3
    assert all(s["status"] == "Running" for s in snapshots)
    elapsed = [s["elapsed_s"] for s in snapshots[:-1]]  # the last one is the end's
    assert all(later - earlier >= 2 for earlier, later in itertools.pairwise(elapsed))
    for key in ("mini_batches_total", "mini_batches_done"):
        counts = [s[key] for s in snapshots]
        assert counts == sorted(counts)
    assert snapshots[0]["mini_batches_total"] < 10  # the plan streams in
    assert all(s["eta_s"] is None for s in snapshots if s["mini_batches_total"] < 10), "no estimate while planning"
    final = snapshots[-1]
    assert (final["mini_batches_total"], final["mini_batches_done"], final["mini_batches_succeeded"]) == (10, 10, 10)
    assert (final["attempts_retried"], final["workers_started"], final["workers_busy"], final["workers_idle"]) == (
        1,
        3,
        0,
        2,
    )
    overview = result.logs.progress_overview.read_text()
    assert "10 mini-batches created; 10 processed (10 succeeded, 0 failed, 0 reused)." in overview

    lines = [json.loads(line) for line in result.logs.events.read_text().splitlines()]
    assert lines == result.events
    assert result.kinds()[0] == "job_started"
    assert result.events[0]["mini_batches"] is None  # still planning when the job started
    assert result.kinds().count("worker_started") == 3
    replaced = next(e for e in result.events if e["type"] == "worker_replaced")
    assert (replaced["worker"], replaced["reason"], replaced["detail"]) == (
        "node0/process000",
        "crashed",
        "worker exited with SIGKILL(-9)",
    )
    assert result.events[-1]["type"] == "job_finished"
    assert (result.events[-1]["status"], result.events[-1]["reason"]) == ("Succeeded", "every mini-batch succeeded")


# The no-progress timeout ---------------------------------------------------------------------------------


def test_no_completion_within_the_progress_timeout_fails_the_job(drive):
    result = drive(mini_batches(4), {1: [Ok(takes=math.inf)], 0: [Ok(takes=math.inf)]}, progress_update_timeout=60)

    assert result.status == "Failed"
    assert result.reason == (
        "no mini-batch completed for 60 s (progress_update_timeout); the job looks hung. "
        "Stacks of hung workers are in logs/user/error/"
    )


@pytest.mark.parametrize("hang_timeout", [None, 300])
def test_a_run_the_entry_script_gave_more_time_is_exempt_from_the_progress_timeout(drive, hang_timeout):
    """Both workers run 120 s mini-batches under a 60 s progress timeout; the entry script said so."""
    slow = [Ok(takes=120, hang_timeout=hang_timeout)]
    result = drive(mini_batches(2), {0: slow, 1: slow}, progress_update_timeout=60)

    assert result.status == "Succeeded"
    limit = "no limit" if hang_timeout is None else "300 s"
    assert f"node0/process000 set the run() timeout of its current mini-batch to {limit}" in result.master_role()


def test_hang_detection_off_waits_for_a_slow_mini_batch(drive):
    result = drive(
        mini_batches(2), {0: [Ok(takes=120)], 1: [Ok(takes=120)]}, progress_update_timeout=60, hang_detection=False
    )

    assert result.status == "Succeeded"
