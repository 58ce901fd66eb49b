"""The local pool's watchdog (pool/local/watchdog.py) and the marker it reads (pool/local/marker.py), against
fake worker handles and a clock the tests set: no worker process, no sleep."""

import math
import os
import signal

import pytest

from parallel_steps.pool.local.marker import Marker
from parallel_steps.pool.local.watchdog import Watchdog, oom_hint
from parallel_steps.pool.slots import DUMP_GRACE_S, MEMORY_CHECK_S, Slot, WorkerState
from parallel_steps.protocol import LossReason, WorkerInfo
from parallel_steps.store.logs import RunLogs

T0 = 5000.0


class FakeMarker:
    def __init__(self):
        self.index, self.since = -1, 0.0

    def get(self):
        return self.index, self.since


class FakeProcess:
    pid = 4242


class FakeWorker:
    """What the watchdog touches of a `WorkerProcess`; records what it was made to do."""

    def __init__(self, logs):
        self.info = WorkerInfo(id="node0/process000", node_index=0, node_id="node0", process_name="process000", slot=0)
        self.slot = Slot(state=WorkerState.READY)
        self.marker = FakeMarker()
        self.process = FakeProcess()
        self.logs = logs
        self.last_rss = 0
        self.done: list[str] = []

    def observe(self):
        self.slot.start(*self.marker.get()[:2])

    def runs(self, index, since):
        self.marker.index, self.marker.since = index, since

    def kill(self):
        self.done.append("kill")

    def dump_stacks(self):
        self.done.append("dump")
        return True


@pytest.fixture
def worker(tmp_path):
    return FakeWorker(RunLogs(tmp_path / "run").worker("node0", "process000"))


def test_a_run_past_its_deadline_gets_its_stacks_dumped_then_a_kill_after_the_grace(worker):
    watchdog = Watchdog(None)
    worker.slot.hold(7, 1, 2.0)
    worker.runs(7, T0)

    watchdog.enforce([worker], T0 + 1.9)
    assert worker.done == []

    watchdog.enforce([worker], T0 + 2.0)
    assert worker.done == ["dump"]
    assert (worker.slot.loss, worker.slot.loss_detail) == (LossReason.TIMED_OUT, "run() exceeded 2 s on mini-batch 7")
    assert "run() exceeded 2 s on mini-batch 7; stacks of every thread:" in worker.logs.error.read_text()

    watchdog.enforce([worker], T0 + 2.0 + DUMP_GRACE_S / 2)
    assert worker.done == ["dump"]  # its stacks are being written
    watchdog.enforce([worker], T0 + 2.0 + DUMP_GRACE_S)
    assert worker.done == ["dump", "kill"]
    watchdog.enforce([worker], T0 + 10)
    assert worker.done == ["dump", "kill"]  # once


def test_the_deadline_counts_from_the_start_the_marker_shows(worker):
    """Queued behind a slow one, a mini-batch's time starts when the worker starts it."""
    watchdog = Watchdog(None)
    worker.slot.hold(0, 1, 2.0)
    worker.slot.hold(1, 1, 2.0)
    worker.runs(0, T0)
    watchdog.enforce([worker], T0 + 1.5)
    worker.slot.finish(0)
    worker.runs(1, T0 + 1.5)

    watchdog.enforce([worker], T0 + 3.0)  # past 0's deadline, not past 1's
    assert worker.done == []
    watchdog.enforce([worker], T0 + 3.5)
    assert worker.done == ["dump"]
    assert worker.slot.loss_detail == "run() exceeded 2 s on mini-batch 1"


def test_an_idle_worker_is_left_alone(worker):
    watchdog = Watchdog(None, rss=lambda pid: pytest.fail("an idle worker's memory was sampled"))
    watchdog.enforce([worker], T0 + 10**6)
    assert worker.done == []


def test_a_busy_worker_above_the_memory_limit_is_killed_at_once(worker):
    samples = {FakeProcess.pid: 700 << 20}
    watchdog = Watchdog(300 << 20, rss=samples.__getitem__)
    worker.slot.hold(0, 1, None)
    worker.runs(0, T0)

    watchdog.enforce([worker], T0)

    assert worker.done == ["kill"]
    assert worker.slot.loss is LossReason.OUT_OF_MEMORY
    assert worker.slot.loss_detail == "OutOfMemory: worker used 700 MB, above worker_memory_limit 300 MB"
    assert worker.last_rss == 700 << 20


def test_memory_is_sampled_once_per_interval_and_remembered_without_a_limit(worker):
    """The last reading serves the OOM-killer hint even when no limit is set."""
    readings = iter([100 << 20, 200 << 20])
    watchdog = Watchdog(None, rss=lambda pid: next(readings))
    worker.slot.hold(0, 1, None)
    worker.runs(0, T0)

    watchdog.enforce([worker], T0)
    watchdog.enforce([worker], T0 + MEMORY_CHECK_S / 2)  # not due: no reading taken
    assert worker.last_rss == 100 << 20
    watchdog.enforce([worker], T0 + MEMORY_CHECK_S)
    assert worker.last_rss == 200 << 20
    assert worker.done == []


def test_the_next_look_is_the_nearest_deadline_kill_or_memory_sample(worker):
    watchdog = Watchdog(None, rss=lambda pid: 0)
    worker.slot.hold(0, 1, 30.0)
    worker.runs(0, T0)
    watchdog.enforce([worker], T0)  # samples memory: the next sample is due in MEMORY_CHECK_S

    assert watchdog.next_wakeup([worker], T0) == T0 + MEMORY_CHECK_S
    worker.slot.set_hang_timeout(0.5, T0)
    assert watchdog.next_wakeup([worker], T0) == T0 + 0.5


def test_a_queued_mini_batch_not_yet_started_is_looked_for_soon(worker):
    """It may start any moment, and its deadline counts from then."""
    watchdog = Watchdog(None, rss=lambda pid: 0)
    watchdog.enforce([worker], T0)
    worker.slot.hold(0, 1, 30.0)

    assert T0 < watchdog.next_wakeup([worker], T0) < T0 + MEMORY_CHECK_S


def test_with_nothing_to_watch_the_watchdog_sleeps_long(worker):
    assert Watchdog(None).next_wakeup([worker], T0) == T0 + 3600


def test_a_sigkill_not_sent_by_the_pool_hints_at_memory_only_when_rss_was_known(worker):
    assert oom_hint(worker, -signal.SIGKILL) == ""  # no reading
    worker.last_rss = 64 << 20
    assert oom_hint(worker, 1) == ""  # not a SIGKILL
    assert oom_hint(worker, -signal.SIGKILL) == ", not sent by parallel-steps (last RSS 64 MB)"


# The marker ----------------------------------------------------------------------------------------------------


@pytest.fixture
def marker():
    marker = Marker.create()
    yield marker
    marker.close()


def test_a_new_marker_says_idle_and_leaves_deadlines_to_the_pool(marker):
    index, since, deadline = marker.get()
    assert (index, since, math.isnan(deadline)) == (-1, 0.0, True)


def test_the_marker_carries_the_mini_batch_and_its_start_to_another_mapping(marker):
    """As the pool reads what the worker writes, through the same memory file."""
    reader = Marker(os.dup(marker.fd))
    try:
        marker.set(12, T0, T0 + 5)  # an async worker keeps the deadline itself
        assert reader.get() == (12, T0, T0 + 5)
        marker.clear()
        assert reader.get()[:2] == (-1, 0.0)
    finally:
        reader.close()


def test_a_writer_that_died_in_the_middle_of_a_write_leaves_the_last_reading(marker):
    """A torn write (the generation left odd for good) does not hang the reader."""
    marker.set(3, T0)
    generation = marker._FIELDS.unpack_from(marker._map)[0]
    marker._FIELDS.pack_into(marker._map, 0, generation + 1, 4, T0 + 1, 7.0)  # a write begun, never finished

    assert marker.get() == (4, T0 + 1, 7.0)  # each field one word: the new values, never a mix
