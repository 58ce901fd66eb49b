"""The worker pool contract: the same cases, run against the local pool and the Ray pool.

The driver relies on every pool alike (pool/base.py, protocol.py): a started worker says
Ready or InitFailed; a mini-batch ends in Finished (run() returned or raised) or in Lost
(the worker is gone, with the reason and the mini-batch it was running); the ones queued
behind a lost worker are never reported, the driver gives them to other workers; close()
is bounded whatever shutdown() does. The fault table of the pools is written here, once.

The pools are driven directly, as the driver drives them: `make_pool(config, make_spec,
environment)`, then `submit` / `next_events` / `replace` / `close`. Two differences are the
contract's own: Ray does not report a dead actor's exit code, so `Lost.exit_code` is None there; and
a Ray actor that dies among the quick mini-batches of one call cannot say which one it ran, so that
loss names none and they run again one per call, where the one that kills its worker is named
(`expected_blames`).
No worker is left behind: tests/conftest.py checks the processes, tests/ray_session.py the actors.
The cases wait for events, never for time, except where the contract is about time passing (a
timeout that must not fire, a grace that must end).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool.base import WorkerPool
from parallel_steps.pool.factory import make_pool
from parallel_steps.protocol import (
    Event,
    Finished,
    HangTimeoutChanged,
    InitFailed,
    ItemsLoaded,
    LossReason,
    Lost,
    Ready,
    WorkerInfo,
    WorkerSpec,
)
from parallel_steps.store.logs import RunLogs
from parallel_steps.store.output import assemble

#: What each mini-batch does is named by its one file: `<kind>-<index>.txt`.
SCRIPT = """\
import os, signal, sys, time
from azureml_user.parallel_run import EntryScript


def init():
    fault = os.environ.get("FAULT_IN_INIT")
    if fault == "raise":
        raise RuntimeError("init() cannot load the model")
    if fault == "exit":
        os._exit(4)


def run(mini_batch):
    name = os.path.basename(mini_batch[0])
    kind = name.split("-")[0]
    if kind == "raise":
        raise ValueError(f"cannot parse {name}")
    if kind in ("exit", "sigkill"):
        print(f"about to die on {name}", file=sys.stderr, flush=True)
        if kind == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(600)  # HANG LINE
    if kind == "hog":
        block = b"x" * (600 << 20)
        time.sleep(600)
    if kind == "slow":
        with EntryScript().hang_timeout(60):
            go = os.path.join(os.path.dirname(mini_batch[0]), "go")
            while not os.path.exists(go):  # until the test has seen the run() timeout pass
                time.sleep(0.05)
    return [f"{name} done"]


def shutdown():
    if os.environ.get("FAULT_IN_SHUTDOWN") == "hang":
        time.sleep(600)
    open(os.path.join(os.environ["SHUTDOWN_MARKS"], os.environ["PARALLEL_STEPS_PROCESS_NAME"]), "w").close()
"""
HANG_LINE = next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if "HANG LINE" in line)
#: How long the tests wait for the events a case expects (a bound against a broken pool, not a speed).
WAIT_S = 60


def expected_exit_code(backend: str, code: int) -> int | None:
    """Ray cannot learn a dead actor's exit code."""
    return code if backend == "local" else None


def expected_blames(backend: str, culprit: int) -> list[int | None]:
    """What the losses name when `culprit` kills its worker each time, among quick mini-batches submitted together:
    the local pool's marker names it at once; a Ray call of several says nothing of quick ones, so the first loss
    names none, and the culprit, then run in a call of its own, is named."""
    return [culprit] if backend == "local" else [None, culprit]


class Run:
    """The run directory a pool's workers write to, and its pools (closed when the test ends)."""

    def __init__(self, backend: str, root: Path, stack: contextlib.ExitStack):
        self.backend, self.root, self._stack = backend, root, stack
        self.script = root / "score.py"
        self.script.write_text(SCRIPT)
        self.logs = RunLogs(root / "run")
        self.parts = root / "run" / "parts"
        self.parts.mkdir()
        self.shutdown_marks = root / "shutdown"
        self.shutdown_marks.mkdir()

    def pool(self, processes: int = 1, environment: dict[str, str] | None = None, **fields) -> WorkerPool:
        """A started pool of `processes` workers on one node."""
        config = ParallelRunConfig(
            name="contract",
            entry_script=str(self.script),
            backend=self.backend,
            process_count_per_node=processes,
            **fields,
        )
        environment = {"SHUTDOWN_MARKS": str(self.shutdown_marks), **(environment or {})}
        return self._stack.enter_context(make_pool(config, self.spec, environment))

    def spec(self, node_index: int, node_id: str, process_name: str) -> WorkerSpec:
        return WorkerSpec(
            node_id=node_id,
            process_name=process_name,
            logs=self.logs.worker(node_id, process_name),
            parts_dir=str(self.parts),
            output_dir=str(self.root / "out"),
            output_format="text",
            append_row=True,
            entry_script=str(self.script),
        )

    def mini_batch(self, index: int, kind: str = "ok", padding: int = 0) -> MiniBatch:
        """A mini-batch of one file; its item count is left to the worker (as for tabular inputs).
        `padding` bytes of read options make its descriptor that much larger."""
        path = self.root / "data" / f"{kind}-{index}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text("x\n")
        read = {"padding": "p" * padding} if padding else None
        return MiniBatch(index, "files", (str(path),), f"fingerprint-{index}", 2, None, read=read)

    def let_slow_runs_end(self) -> None:
        (self.root / "data" / "go").touch()

    def error_log(self, worker: WorkerInfo) -> str:
        return self.logs.worker(worker.node_id, worker.process_name, create=False).error.read_text()


@pytest.fixture
def run(backend, tmp_path):
    with contextlib.ExitStack() as stack:
        yield Run(backend, tmp_path, stack)


def events_until(pool: WorkerPool, done: Callable[[list[Event]], bool]) -> list[Event]:
    """Every event the pool reports until `done(events)` holds."""
    events: list[Event] = []
    deadline = time.monotonic() + WAIT_S
    while not done(events):
        assert time.monotonic() < deadline, f"the pool did not report what was expected; it reported {events}"
        events += pool.next_events(0.5)
    return events


def of(kind: type, events: list[Event]) -> list:
    return [event for event in events if isinstance(event, kind)]


def ready_workers(pool: WorkerPool, count: int = 1) -> list[WorkerInfo]:
    events = events_until(pool, lambda events: len(of(Ready, events)) + len(of(InitFailed, events)) >= count)
    assert of(InitFailed, events) == []
    return [event.worker for event in of(Ready, events)]


def first_end(pool: WorkerPool, worker: WorkerInfo, mini_batch: MiniBatch, timeout: float | None = 30) -> list[Event]:
    """Submit one mini-batch; the events until it finished or was lost."""
    pool.submit(worker, mini_batch, 1, timeout)
    return events_until(pool, lambda events: bool(of(Finished, events) or of(Lost, events)))


def all_or_a_loss(pool: WorkerPool, worker: WorkerInfo, mini_batches: list[MiniBatch]) -> list[Event]:
    """Submit `mini_batches` together; the events until all of them finished or the worker was lost."""
    for mini_batch in mini_batches:
        pool.submit(worker, mini_batch, 1, 30)
    return events_until(pool, lambda events: bool(of(Lost, events)) or len(of(Finished, events)) == len(mini_batches))


def warm_up(pool: WorkerPool, worker: WorkerInfo, run: Run) -> None:
    """One mini-batch run to its end, so that the worker has taken a first call (on Ray a fresh actor's first
    calls are small), and the ones submitted next share a call."""
    assert isinstance(the_end(first_end(pool, worker, run.mini_batch(0))), Finished)


def the_end(events: list[Event]) -> Finished | Lost:
    ends = of(Finished, events) + of(Lost, events)
    assert len(ends) == 1, events
    return ends[0]


# Mini-batches that end ---------------------------------------------------------------------------


def test_a_mini_batch_finishes_with_its_rows_in_the_spool_slice(run):
    pool = run.pool()
    (worker,) = ready_workers(pool)
    assert (worker.node_id, worker.process_name, worker.slot) == ("node0", "process000", 0)
    assert worker.pid is not None

    events = first_end(pool, worker, run.mini_batch(0))

    finished = the_end(events)
    assert isinstance(finished, Finished)
    assert (finished.worker, finished.mini_batch) == (worker, 0)
    assert (finished.outcome.ok, finished.outcome.items, finished.outcome.returned) == (True, 1, 1)
    output = run.root / "output.txt"
    assemble([finished.outcome.part], output, "text")  # the slice as the output file takes it
    assert output.read_bytes() == b"ok-0.txt done\n"
    loaded = of(ItemsLoaded, events)  # an item count only reading could tell: reported before the end, if at all
    assert all((e.mini_batch, e.items) == (0, 1) for e in loaded)
    assert events.index(finished) > max(map(events.index, loaded), default=-1)


def test_a_run_that_raises_finishes_with_the_error_and_the_worker_goes_on(run):
    pool = run.pool()
    (worker,) = ready_workers(pool)

    failed = the_end(first_end(pool, worker, run.mini_batch(0, "raise")))
    succeeded = the_end(first_end(pool, worker, run.mini_batch(1)))

    assert isinstance(failed, Finished)
    assert failed.outcome.ok is False
    assert failed.outcome.error.startswith("Traceback")
    assert failed.outcome.error.strip().endswith("ValueError: cannot parse raise-0.txt")
    assert "ValueError: cannot parse raise-0.txt" in run.error_log(worker)
    assert (succeeded.worker, succeeded.outcome.ok) == (worker, True)


def test_a_run_given_more_time_by_the_entry_script_is_not_timed_out(run):
    """run() enters `EntryScript().hang_timeout(60)` under a 3 s timeout and stays there until the 3 s
    are over (the pool learns of the new limit through the worker's messages, well within them)."""
    pool = run.pool()
    (worker,) = ready_workers(pool)
    timeout = 3
    started = time.monotonic()
    pool.submit(worker, run.mini_batch(0, "slow"), 1, timeout)

    events = events_until(pool, lambda events: bool(of(HangTimeoutChanged, events) or of(Lost, events)))
    events += events_until(pool, lambda _: time.monotonic() > started + timeout + 1)  # the pool's loop runs on
    run.let_slow_runs_end()
    events += events_until(pool, lambda events: bool(of(Finished, events) or of(Lost, events)))

    finished = the_end(events)
    assert isinstance(finished, Finished)
    assert finished.outcome.ok
    changes = of(HangTimeoutChanged, events)
    assert changes[0] == HangTimeoutChanged(worker, 60)
    assert events.index(changes[0]) < events.index(finished)


def test_a_run_given_more_time_among_quick_ones_is_not_timed_out_and_each_result_comes_once(run):
    """Submitted together, the mini-batches share calls on Ray: the one whose script lifts its limit says so
    while its call runs, and its end brings the results before it; none is reported twice."""
    pool = run.pool()
    (worker,) = ready_workers(pool)
    warm_up(pool, worker, run)
    timeout = 3
    started = time.monotonic()
    for index, kind in enumerate(["ok", "ok", "ok", "slow", "ok"], 1):
        pool.submit(worker, run.mini_batch(index, kind), 1, timeout)

    events = events_until(pool, lambda events: bool(of(HangTimeoutChanged, events) or of(Lost, events)))
    events += events_until(pool, lambda _: time.monotonic() > started + timeout + 1)  # the pool's loop runs on
    run.let_slow_runs_end()
    events += events_until(pool, lambda more: len(of(Finished, events + more)) == 5 or bool(of(Lost, more)))

    assert of(Lost, events) == []
    assert sorted(event.mini_batch for event in of(Finished, events)) == [1, 2, 3, 4, 5]
    assert all(event.outcome.ok for event in of(Finished, events))
    assert of(HangTimeoutChanged, events)[0] == HangTimeoutChanged(worker, 60)


# Workers that are lost -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "code"), [("exit", 3), ("sigkill", -signal.SIGKILL)])
def test_a_crash_loses_the_worker_with_the_mini_batch_it_ran(run, kind, code):
    pool = run.pool()
    (worker,) = ready_workers(pool)

    lost = the_end(first_end(pool, worker, run.mini_batch(0, kind)))

    assert isinstance(lost, Lost)
    assert (lost.worker, lost.mini_batch, lost.reason) == (worker, 0, LossReason.CRASHED)
    assert lost.exit_code == expected_exit_code(run.backend, code)
    assert f"about to die on {kind}-0.txt" in lost.detail  # the last lines of its stderr


def test_a_hang_past_the_timeout_loses_the_worker_with_its_stacks(run):
    pool = run.pool()
    (worker,) = ready_workers(pool)

    events = first_end(pool, worker, run.mini_batch(0, "hang"), timeout=1)

    lost = the_end(events)
    assert isinstance(lost, Lost)
    assert of(ItemsLoaded, events) == [ItemsLoaded(worker, 0, 1)]  # the driver counts them as failed items
    assert (lost.mini_batch, lost.reason) == (0, LossReason.TIMED_OUT)
    assert lost.detail.startswith(f"run() exceeded 1 s on mini-batch 0; hung at score.py line {HANG_LINE} in run")
    dump = run.error_log(worker)
    assert "run() exceeded 1 s on mini-batch 0; stacks of every thread:" in dump
    assert f'File "{run.script}", line {HANG_LINE} in run' in dump


def test_a_hung_worker_whose_queue_fills_its_pipe_is_still_timed_out(run):
    """Megabytes of descriptors queued behind a run() that hangs: the worker reads none of them, and the
    pool, which writes them without blocking, still ends the hung one on time."""
    pool = run.pool()
    (worker,) = ready_workers(pool)
    pool.submit(worker, run.mini_batch(0, "hang"), 1, 1)
    events = events_until(pool, lambda events: bool(of(ItemsLoaded, events)))  # run() has started
    for index in range(1, 21):
        pool.submit(worker, run.mini_batch(index, padding=400_000), 1, 30)

    events += events_until(pool, lambda events: bool(of(Lost, events)))

    (lost,) = of(Lost, events)
    assert (lost.worker, lost.mini_batch, lost.reason) == (worker, 0, LossReason.TIMED_OUT)
    assert of(Finished, events) == []  # the queue behind it goes back to the driver, unreported


def test_memory_above_the_limit_loses_the_worker(run):
    pool = run.pool(worker_memory_limit="300MB")
    (worker,) = ready_workers(pool)

    lost = the_end(first_end(pool, worker, run.mini_batch(0, "hog")))

    assert isinstance(lost, Lost)
    assert (lost.mini_batch, lost.reason) == (0, LossReason.OUT_OF_MEMORY)
    assert re.fullmatch(r"OutOfMemory: worker used \d+ MB, above worker_memory_limit 300 MB", lost.detail)


def test_the_queue_behind_a_lost_worker_is_not_reported_and_a_replacement_takes_the_slot(run):
    """The head is lost; the two queued behind it never end on that worker: the driver gives them to
    the replacement, a new process name in the same slot."""
    pool = run.pool()
    (worker,) = ready_workers(pool)
    for mini_batch in (run.mini_batch(0, "exit"), run.mini_batch(1), run.mini_batch(2)):
        pool.submit(worker, mini_batch, 1, 30)

    events = events_until(pool, lambda events: bool(of(Lost, events)))
    pool.replace(worker)
    events += events_until(pool, lambda events: bool(of(Ready, events)))
    (replacement,) = [event.worker for event in of(Ready, events)]
    pool.submit(worker, run.mini_batch(3), 1, 30)  # the lost worker is unknown now: ignored, no error
    for index in (1, 2):
        pool.submit(replacement, run.mini_batch(index), 1, 30)
    events += events_until(pool, lambda events: len(of(Finished, events)) == 2)

    lost = of(Lost, events)
    assert [(e.worker, e.mini_batch, e.reason) for e in lost] == [(worker, 0, LossReason.CRASHED)]
    assert [(e.worker, e.mini_batch) for e in of(Finished, events)] == [(replacement, 1), (replacement, 2)]
    assert (replacement.node_id, replacement.slot) == (worker.node_id, worker.slot)
    assert replacement.process_name == "process001"
    assert replacement.id == "node0/process001"
    assert replacement.pid not in (None, worker.pid)


def test_a_crash_among_quick_mini_batches_is_never_blamed_on_another(run):
    """Acting as the driver: after each loss, the mini-batches not reported go to the replacement, the one
    the loss named excepted (it would be retried). The culprit is named in the end, nothing else ever is,
    and every other mini-batch is reported once."""
    pool = run.pool()
    (worker,) = ready_workers(pool)
    warm_up(pool, worker, run)
    mini_batches = {index: run.mini_batch(index, "sigkill" if index == 4 else "ok") for index in range(1, 7)}

    events, todo = [], sorted(mini_batches)
    while todo:
        more = all_or_a_loss(pool, worker, [mini_batches[index] for index in todo])
        events += more
        ended = {event.mini_batch for event in of(Finished, more) + of(Lost, more)}
        todo = [index for index in todo if index not in ended]
        if of(Lost, more):
            pool.replace(worker)
            (worker,) = ready_workers(pool)

    lost = of(Lost, events)
    assert [event.mini_batch for event in lost] == expected_blames(run.backend, 4)
    assert {event.reason for event in lost} == {LossReason.CRASHED}
    assert sorted(event.mini_batch for event in of(Finished, events)) == [1, 2, 3, 5, 6]


def test_a_hang_among_quick_mini_batches_is_timed_out_on_that_one_with_its_stacks(run):
    pool = run.pool()
    (worker,) = ready_workers(pool)
    warm_up(pool, worker, run)
    for index, kind in enumerate(["ok", "ok", "ok", "hang", "ok", "ok"], 1):
        pool.submit(worker, run.mini_batch(index, kind), 1, 2)

    events = events_until(pool, lambda events: bool(of(Lost, events)))

    (lost,) = of(Lost, events)
    assert (lost.worker, lost.mini_batch, lost.reason) == (worker, 4, LossReason.TIMED_OUT)
    assert lost.detail.startswith(f"run() exceeded 2 s on mini-batch 4; hung at score.py line {HANG_LINE} in run")
    assert {event.mini_batch for event in of(Finished, events)} <= {1, 2, 3}  # the rest go back unreported
    assert ItemsLoaded(worker, 4, 1) in events
    dump = run.error_log(worker)
    assert "run() exceeded 2 s on mini-batch 4; stacks of every thread:" in dump
    assert f'File "{run.script}", line {HANG_LINE} in run' in dump


def test_a_submit_to_a_worker_the_pool_does_not_know_is_ignored(run):
    pool = run.pool()
    (worker,) = ready_workers(pool)
    stranger = WorkerInfo(id="node0/process999", node_index=0, node_id="node0", process_name="process999", slot=0)

    pool.submit(stranger, run.mini_batch(0), 1, 30)
    events = first_end(pool, worker, run.mini_batch(1))

    assert {event.worker for event in events} == {worker}
    assert the_end(events).mini_batch == 1


# Starting and stopping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [("raise", "RuntimeError: init() cannot load the model"), ("exit", "during init()")],
)
def test_a_worker_whose_init_fails_reports_init_failed(run, fault, error):
    pool = run.pool(processes=2, environment={"FAULT_IN_INIT": fault})

    events = events_until(pool, lambda events: len(of(InitFailed, events)) == 2)

    assert sorted(event.worker.process_name for event in events) == ["process000", "process001"]
    assert all(error in event.error for event in events), events
    assert of(Ready, events) == []


def test_close_runs_shutdown_on_idle_workers(run):
    pool = run.pool(processes=2)
    workers = ready_workers(pool, 2)

    pool.close(grace=30)

    assert sorted(p.name for p in run.shutdown_marks.iterdir()) == sorted(w.process_name for w in workers)
    assert pool.shutdown_cut_off == []


def test_close_kills_a_busy_worker_without_shutdown(run):
    pool = run.pool(processes=2)
    busy, idle = ready_workers(pool, 2)
    pool.submit(busy, run.mini_batch(0, "hang"), 1, None)
    events_until(pool, lambda events: bool(of(ItemsLoaded, events)))  # run() has started

    pool.close(grace=30)

    assert [p.name for p in run.shutdown_marks.iterdir()] == [idle.process_name]
    assert pool.shutdown_cut_off == []


@pytest.mark.timeout(120)  # shutdown() sleeps for 600 s: only a bounded close() ends this test
def test_close_cuts_off_a_shutdown_that_does_not_return(run):
    pool = run.pool(environment={"FAULT_IN_SHUTDOWN": "hang"})
    (worker,) = ready_workers(pool)

    pool.close(grace=1)

    assert pool.shutdown_cut_off == [worker.id]
    log = run.error_log(worker)
    assert "shutdown() did not finish within 1 s; the worker is killed" in log
    assert "in shutdown" in log  # its stacks
    assert list(run.shutdown_marks.iterdir()) == []
