"""The books a pool keeps of each worker (pool/slots.py), against a clock the tests set.

These are the rules both pools apply: when a run() is due to be timed out, what a hang timeout
changes, when a hung worker is killed, which mini-batch a loss is blamed on, and the texts of losses.
"""

import pytest

from parallel_steps.pool.slots import (
    DUMP_GRACE_S,
    Due,
    Slot,
    WorkerState,
    died_in_init_detail,
    exit_name,
    next_wakeup,
    out_of_memory_detail,
    shutdown_cut_off_detail,
    timed_out_detail,
)
from parallel_steps.protocol import LossReason

T0 = 1000.0  # the fake clock's start: any monotonic reading


def ready_slot(*held: tuple[int, float | None], attempt: int = 1) -> Slot:
    """A ready worker holding mini-batches (index, timeout), none started yet."""
    slot = Slot(state=WorkerState.READY)
    for index, timeout in held:
        slot.hold(index, attempt, timeout)
    return slot


# Deadlines ---------------------------------------------------------------------------------------


def test_a_deadline_counts_from_the_real_start_not_from_the_submit():
    slot = ready_slot((0, 10.0))
    assert slot.deadline is None  # held, not started: nothing to time out yet

    slot.start(0, T0 + 3)

    assert (slot.running, slot.deadline) == (0, T0 + 13)
    assert slot.due(T0 + 12.9) is None
    assert slot.due(T0 + 13) is Due.TIME_OUT


@pytest.mark.parametrize("timeout", [None, 0.0])
def test_no_timeout_means_no_deadline(timeout):
    slot = ready_slot((0, timeout))
    slot.start(0, T0)

    assert slot.deadline is None
    assert slot.due(T0 + 10**9) is None


def test_the_same_start_seen_again_changes_nothing_but_a_new_start_does():
    slot = ready_slot((0, 10.0), (1, 5.0))
    slot.start(0, T0)
    slot.set_hang_timeout(100, T0 + 1)

    slot.start(0, T0)  # the marker read again: the extension stands
    assert slot.deadline == T0 + 101

    slot.start(1, T0 + 2)  # the next one started: its own timeout, from its start
    assert (slot.running, slot.deadline) == (1, T0 + 7)


def test_a_start_of_a_mini_batch_it_does_not_hold_means_it_runs_none():
    slot = ready_slot((0, 10.0))
    slot.start(0, T0)

    slot.start(-1, 0.0)  # an idle marker

    assert (slot.running, slot.deadline) == (None, None)
    assert slot.due(T0 + 10**6) is None


def test_a_finished_result_ends_the_deadline_of_the_one_it_ran():
    slot = ready_slot((0, 10.0), (1, 10.0))
    slot.start(0, T0)

    held = slot.finish(0)

    assert (held.index, held.attempt, held.timeout) == (0, 1, 10.0)
    assert (slot.running, slot.deadline) == (None, None)
    assert list(slot.held) == [1]


def test_a_result_for_a_mini_batch_it_does_not_hold_is_stale():
    slot = ready_slot((0, 10.0))

    assert slot.finish(7) is None
    assert list(slot.held) == [0]


def test_a_result_of_an_earlier_one_keeps_the_deadline_of_the_one_it_runs():
    """Results of quick mini-batches come in batches, after the next one started."""
    slot = ready_slot((0, 10.0), (1, 4.0))
    slot.start(1, T0)

    slot.finish(0)

    assert (slot.running, slot.deadline) == (1, T0 + 4)


# Hang timeouts -------------------------------------------------------------------------------------


def test_a_hang_timeout_counts_from_when_it_was_given():
    slot = ready_slot((0, 10.0))
    slot.start(0, T0)

    limit = slot.set_hang_timeout(60, T0 + 5)

    assert limit == 60
    assert slot.deadline == T0 + 65
    assert slot.due(T0 + 64) is None
    assert slot.due(T0 + 65) is Due.TIME_OUT


def test_a_hang_timeout_of_none_lifts_the_limit():
    slot = ready_slot((0, 10.0))
    slot.start(0, T0)

    assert slot.set_hang_timeout(None, T0 + 5) is None
    assert slot.deadline is None
    assert slot.due(T0 + 10**6) is None


def test_a_negative_hang_timeout_means_the_run_timeout_again_from_now():
    slot = ready_slot((0, 10.0))
    slot.start(0, T0)
    slot.set_hang_timeout(None, T0 + 1)

    limit = slot.set_hang_timeout(-1, T0 + 30)

    assert limit == 10.0
    assert slot.deadline == T0 + 40


def test_a_negative_hang_timeout_without_a_run_timeout_means_no_limit():
    slot = ready_slot((0, None))
    slot.start(0, T0)
    slot.set_hang_timeout(5, T0)

    assert slot.set_hang_timeout(-1, T0 + 1) is None
    assert slot.deadline is None


def test_a_hang_timeout_for_a_worker_that_runs_nothing_is_a_bug():
    with pytest.raises(RuntimeError):
        ready_slot((0, 10.0)).set_hang_timeout(5, T0)


# Time-outs and kills ---------------------------------------------------------------------------------


def test_a_time_out_gives_the_worker_up_and_kills_it_after_the_dump_grace():
    slot = ready_slot((3, 2.0))
    slot.start(3, T0)
    assert slot.due(T0 + 2) is Due.TIME_OUT

    detail = slot.time_out(T0 + 2)

    assert detail == "run() exceeded 2 s on mini-batch 3"
    assert (slot.loss, slot.loss_detail) == (LossReason.TIMED_OUT, detail)
    assert slot.state is WorkerState.STOPPING
    assert not slot.busy
    assert slot.kill_at == T0 + 2 + DUMP_GRACE_S
    assert slot.due(T0 + 2 + DUMP_GRACE_S / 2) is None  # neither timed out twice nor killed early
    assert slot.due(T0 + 2 + DUMP_GRACE_S) is Due.KILL
    assert slot.due(T0 + 2 + DUMP_GRACE_S) is None  # the kill is said once


def test_a_dump_that_fires_later_moves_the_kill_with_it():
    """A Ray actor's own faulthandler writes its stacks a little after its deadline."""
    slot = ready_slot((0, 1.0))
    slot.start(0, T0)

    slot.time_out(T0 + 1, dump_delay=0.5)

    assert slot.kill_at == T0 + 1 + 0.5 + DUMP_GRACE_S


def test_a_time_out_for_a_worker_that_runs_nothing_is_a_bug():
    with pytest.raises(RuntimeError):
        ready_slot((0, 1.0)).time_out(T0)


def test_a_worker_that_is_not_ready_is_not_timed_out():
    slot = Slot()  # starting
    slot.hold(0, 1, 1.0)
    slot.start(0, T0)

    assert slot.due(T0 + 5) is None


def test_memory_above_the_limit_gives_the_worker_up_at_once():
    slot = ready_slot((0, None))
    slot.start(0, T0)

    slot.over_memory(600 << 20, 300 << 20)

    assert slot.loss is LossReason.OUT_OF_MEMORY
    assert slot.loss_detail == "OutOfMemory: worker used 600 MB, above worker_memory_limit 300 MB"
    assert slot.state is WorkerState.STOPPING
    assert slot.kill_at is None  # no grace: the pool kills it now


# Blame -------------------------------------------------------------------------------------------------


def test_a_loss_is_blamed_on_the_one_it_ran_not_on_those_queued_behind():
    slot = ready_slot((0, 10.0), (1, 10.0), (2, 10.0))
    slot.start(1, T0)  # 0 finished, its result not in yet

    assert slot.blame() == 1


def test_a_worker_lost_between_mini_batches_is_blamed_on_none():
    slot = ready_slot((0, 10.0), (1, 10.0))
    slot.start(0, T0)
    slot.start(-1, 0.0)  # 0 ended; 1 not started

    assert slot.blame() is None


def test_a_worker_lost_after_the_result_of_the_one_it_ran_is_blamed_on_none():
    slot = ready_slot((0, 10.0))
    slot.start(0, T0)
    slot.finish(0)

    assert slot.blame() is None


def test_a_timed_out_worker_is_blamed_on_the_one_that_timed_out():
    slot = ready_slot((0, 1.0), (1, 1.0))
    slot.start(0, T0)
    slot.time_out(T0 + 1)

    assert slot.blame() == 0


# Attempts, positions ---------------------------------------------------------------------------------


def test_an_attempt_is_held_until_it_ends_and_only_that_attempt():
    slot = ready_slot((0, 1.0), (1, 1.0), attempt=2)

    assert slot.holds(1, 2)
    assert not slot.holds(1, 1)  # an earlier attempt of the same mini-batch ended
    assert not slot.holds(9, 2)
    assert (slot.position(0, 2), slot.position(1, 2), slot.position(1, 3)) == (0, 1, None)
    slot.finish(0)
    assert (slot.head().index, slot.position(1, 2)) == (1, 0)


def test_a_worker_is_busy_while_ready_and_holding_work():
    slot = Slot()
    assert not slot.busy
    slot.state = WorkerState.READY
    assert not slot.busy
    slot.hold(0, 1, None)
    assert slot.busy
    assert slot.head().ref is None


# Wake-ups ------------------------------------------------------------------------------------------------


def test_the_next_wakeup_is_the_earliest_time_set():
    assert next_wakeup(T0, [None, T0 + 5, T0 + 2, None]) == T0 + 2


def test_with_nothing_set_the_next_wakeup_is_an_hour_away():
    assert next_wakeup(T0, [None, None]) == T0 + 3600


def test_a_slot_wakes_for_its_deadline_and_its_kill():
    slot = ready_slot((0, 2.0))
    slot.start(0, T0)
    assert slot.wakeups() == (T0 + 2, None)
    slot.time_out(T0 + 2)
    assert slot.wakeups() == (None, T0 + 2 + DUMP_GRACE_S)


# Texts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (1, "exit code 1"),
        (0, "exit code 0"),
        (-9, "SIGKILL(-9)"),
        (-11, "SIGSEGV(-11)"),
        (-99, "signal 99"),
        (None, "an unknown exit code"),
    ],
)
def test_exit_codes_read_as_people_read_them(code, name):
    assert exit_name(code) == name


def test_the_texts_of_losses():
    assert timed_out_detail(2.5, 7) == "run() exceeded 2.5 s on mini-batch 7"
    assert out_of_memory_detail(2**30, 2**29) == "OutOfMemory: worker used 1024 MB, above worker_memory_limit 512 MB"
    assert shutdown_cut_off_detail(30) == "shutdown() did not finish within 30 s; the worker is killed"
    assert died_in_init_detail("exit code 4") == "worker died during init(): exit code 4"
