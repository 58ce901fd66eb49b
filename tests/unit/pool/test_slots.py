"""The books a pool keeps of each worker (pool/slots.py), against a clock the tests set.

These are the rules both pools apply: when a run() is due to be timed out, what a hang timeout
changes, when a hung worker is killed, which mini-batch a loss is blamed on, and the texts of losses;
and the Ray pool's, whose calls carry several mini-batches each.
"""

import pytest

from parallel_steps.pool.slots import (
    DUMP_GRACE_S,
    Due,
    Slot,
    WorkerState,
    budget,
    call_timed_out_detail,
    died_in_init_detail,
    exit_name,
    next_wakeup,
    out_of_memory_detail,
    shutdown_cut_off_detail,
    timed_out_detail,
    unattributed_detail,
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


# Attempts ---------------------------------------------------------------------------------------------


def test_an_attempt_is_held_until_it_ends_and_only_that_attempt():
    slot = ready_slot((0, 1.0), (1, 1.0), attempt=2)

    assert slot.holds(1, 2)
    assert not slot.holds(1, 1)  # an earlier attempt of the same mini-batch ended
    assert not slot.holds(9, 2)
    assert slot.head().index == 0
    slot.finish(0)
    assert slot.head().index == 1


def test_a_worker_is_busy_while_ready_and_holding_work():
    slot = Slot()
    assert not slot.busy
    slot.state = WorkerState.READY
    assert not slot.busy
    slot.hold(0, 1, None)
    assert slot.busy
    assert slot.head().ref is None


# Calls of several mini-batches (Ray) -------------------------------------------------------------------------


def slot_with_calls(*calls: tuple[str, list[tuple[int, float | None]]]) -> Slot:
    """A ready worker holding calls (name, [(index, timeout)]), the name standing for the call's ref."""
    slot = Slot(state=WorkerState.READY)
    for ref, held in calls:
        for index, timeout in held:
            slot.hold(index, 1, timeout, ref)
    return slot


def test_a_call_of_one_runs_that_one_from_the_calls_start():
    slot = slot_with_calls(("a", [(0, 5.0)]), ("b", [(1, 5.0), (2, 5.0)]))

    slot.start_call("a", T0)

    assert (slot.running, slot.call, slot.deadline, slot.blame()) == (0, "a", T0 + 5, 0)


def test_a_call_of_several_is_bounded_by_the_sum_of_their_timeouts_and_blames_none():
    slot = slot_with_calls(("a", [(0, 5.0), (1, 2.0), (2, 3.0)]), ("b", [(3, 5.0)]))

    slot.start_call("a", T0)

    assert (slot.running, slot.call, slot.deadline) == (None, "a", T0 + 10)
    assert slot.blame() is None
    assert slot.unattributed() == [0, 1, 2]  # not 3: its call never started


def test_a_call_with_a_mini_batch_without_timeout_has_no_deadline():
    slot = slot_with_calls(("a", [(0, 5.0), (1, None)]))

    slot.start_call("a", T0)

    assert slot.deadline is None
    assert budget([5.0, None]) is None
    assert budget([]) is None


def test_a_mini_batch_the_worker_says_it_runs_is_blamed_and_timed_from_its_own_start():
    slot = slot_with_calls(("a", [(0, 5.0), (1, 2.0), (2, 3.0)]))
    slot.start_call("a", T0)

    assert slot.told_running(1, 1, T0 + 0.2)

    assert (slot.running, slot.deadline, slot.blame(), slot.unattributed()) == (1, T0 + 2.2, 1, [])
    assert slot.due(T0 + 2.2) is Due.TIME_OUT


def test_said_again_it_changes_nothing_and_a_hang_timeout_given_meanwhile_stands():
    slot = slot_with_calls(("a", [(0, 5.0), (1, 2.0)]))
    slot.start_call("a", T0)
    slot.told_running(1, 1, T0)
    slot.set_hang_timeout(60, T0 + 1)

    assert slot.told_running(1, 1, T0 + 0.5)
    slot.start_call("a", T0 + 2)  # the return of a call before it, taken late

    assert slot.deadline == T0 + 61


def test_a_stale_say_is_refused():
    slot = slot_with_calls(("a", [(0, 5.0), (1, 2.0)]))
    slot.start_call("a", T0)
    slot.finish(1)

    assert not slot.told_running(1, 1, T0)  # ended
    assert not slot.told_running(0, 2, T0)  # another attempt
    assert (slot.running, slot.deadline) == (None, T0 + 7)


def test_a_time_out_of_a_call_blames_none_and_says_so():
    slot = slot_with_calls(("a", [(0, 1.0), (1, 1.0), (2, 1.0)]))
    slot.start_call("a", T0)

    detail = slot.time_out(T0 + 3, dump_delay=0.5)

    assert detail == call_timed_out_detail(3.0, 3)
    assert detail == "3 mini-batches of one call exceeded the sum of their run() timeouts (3 s)"
    assert (slot.loss, slot.blame(), slot.unattributed()) == (LossReason.TIMED_OUT, None, [0, 1, 2])
    assert slot.kill_at == T0 + 3 + 0.5 + DUMP_GRACE_S


def test_a_calls_results_end_only_its_own_mini_batches():
    """Those told before, and a later attempt of one of them in a later call, are not its results."""
    slot = slot_with_calls(("a", [(0, 5.0), (1, 5.0)]))
    slot.finish(0)  # told before the call returned
    slot.hold(0, 2, 5.0, "b")  # its retry, in a later call

    done = list(slot.finish_call("a", [(0, "outcome 0"), (1, "outcome 1")]))

    assert [(held.index, held.attempt, outcome) for held, outcome in done] == [(1, 1, "outcome 1")]
    assert list(slot.held) == [0]
    assert slot.held[0].attempt == 2


def test_a_worker_that_died_in_a_call_blames_the_one_it_said_runs_or_the_only_one_or_none():
    slot = slot_with_calls(("a", [(0, 5.0)]), ("b", [(1, 5.0), (2, 5.0)]), ("c", [(3, 5.0)]))
    slot.start_call("a", T0)  # as the books have it: 0 runs

    slot.died_in("b")  # the worker says it ended "a"
    assert (slot.blame(), slot.unattributed()) == (None, [1, 2])
    slot.died_in("c")
    assert (slot.blame(), slot.unattributed()) == (3, [])
    slot.told_running(2, 1, T0)
    slot.died_in("b")
    assert slot.blame() == 2
    slot.died_in(None)  # between calls
    assert (slot.blame(), slot.unattributed()) == (None, [])


def test_the_calls_up_to_one_are_those_held_in_run_order():
    slot = slot_with_calls(("a", [(0, 5.0)]), ("b", [(1, 5.0), (2, 5.0)]), ("c", [(3, 5.0)]))

    assert slot.calls_up_to("b") == ["a", "b"]
    assert slot.calls_up_to("gone") == []
    assert slot.call_held("b") == [slot.held[1], slot.held[2]]
    assert slot.call_held(None) == []


def test_what_is_left_of_a_call_after_the_one_said_to_run_ended():
    slot = slot_with_calls(("a", [(0, 5.0), (1, 2.0), (2, 3.0), (3, 4.0)]))
    slot.start_call("a", T0)
    slot.told_running(1, 1, T0)
    list(slot.finish_call("a", [(0, "o"), (1, "o")]))

    slot.start_call("a", T0 + 3)

    assert (slot.running, slot.deadline, slot.unattributed()) == (None, T0 + 10, [2, 3])
    slot.finish(2)
    slot.start_call("a", T0 + 4)
    assert (slot.running, slot.deadline) == (3, T0 + 8)  # one left: that one runs
    slot.finish(3)
    slot.start_call(None, T0 + 5)
    assert (slot.running, slot.call, slot.deadline) == (None, None, None)


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
    assert (
        unattributed_detail(5) == "; which of the 5 mini-batches it ran caused it is not known: each runs again alone"
    )
