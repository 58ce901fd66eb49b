"""One Ray actor as the Ray pool sees it (pool/ray/handle.py), against a fake actor, fake refs and a clock
the tests set. Ray is imported (the handle's module needs it), never started.

A call carries several mini-batches; the books say which one runs only when the call carries one or the
actor says so (`WorkerRunning`, `WorkerEnded`), and a loss in a call of several that nothing named is
blamed on none of them."""

import types

import pytest

pytest.importorskip("ray", reason="the Ray pool's handle needs Ray (the `ray` extra)")

from ray.exceptions import RayActorError

from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool.ray import handle as ray_handle
from parallel_steps.pool.ray.ends import FileEnds, MailboxEnds, ends_for, last_ended
from parallel_steps.pool.ray.handle import CALL_MAX, RayActorHandle
from parallel_steps.pool.ray.nodes import RayNode
from parallel_steps.pool.ray.watch import DUMP_DELAY_S
from parallel_steps.pool.slots import DUMP_GRACE_S, WorkerState
from parallel_steps.protocol import LossReason, Outcome, WorkerEnded, WorkerInfo, WorkerInitFailed, WorkerReady
from parallel_steps.store.logs import RunLogs

T0 = 700.0


class Ref:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Ref({self.name})"


class Calls:
    """`actor.run_many.remote(number, attempts)`: returns a new ref and remembers the call."""

    def __init__(self):
        self.made = []

    def remote(self, number, attempts):
        self.made.append([(mini_batch.index, attempt, timeout) for mini_batch, attempt, timeout in attempts])
        assert number == len(self.made)  # numbered in order, from one
        return Ref(f"call-{number}")


class FakeRay:
    """`ray.get` over results the test sets; a ref without one means the actor died."""

    def __init__(self):
        self.results = {}

    def get(self, ref):
        if ref not in self.results:
            raise RayActorError()
        return self.results[ref]


@pytest.fixture
def clock(monkeypatch):
    clock = types.SimpleNamespace(now=T0)
    monkeypatch.setattr(ray_handle, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    return clock


@pytest.fixture
def fake_ray(monkeypatch):
    fake = FakeRay()
    monkeypatch.setattr(ray_handle, "ray", fake)
    return fake


@pytest.fixture
def handle(tmp_path, clock, fake_ray):
    info = WorkerInfo(id="node0/process000", node_index=0, node_id="node0", process_name="process000", slot=0)
    actor = types.SimpleNamespace(run_many=Calls())
    logs = RunLogs(tmp_path / "run").worker("node0", "process000")
    handle = RayActorHandle(info, actor, RayNode(0, "ray-node", "10.0.0.1", 0), logs, False, start_ref=Ref("start"))
    handle.started(WorkerReady(321, None))
    handle.start_ref = None
    return handle


def mini_batch(index):
    return MiniBatch(index, "files", (f"f{index}",), None, 1, 1)


def submit(handle, *indices, timeout=5.0, attempt=1):
    handle.outbox += [(mini_batch(i), attempt, timeout) for i in indices]


def sent(handle, *indices, alone=(), **kwargs):
    """Submit, then send as the pool does at its next look; returns the calls' refs."""
    submit(handle, *indices, **kwargs)
    return handle.send(set(alone))


def ok(items):
    return Outcome(True, items)


def test_a_ready_reply_makes_the_worker_ready_with_its_pid_and_gpu(handle):
    fresh = RayActorHandle(handle.info, handle.actor, handle.node, handle.logs, True)
    assert fresh.started(WorkerReady(99, "1")) is None
    assert fresh.slot.state is WorkerState.READY
    assert (fresh.info.pid, fresh.info.gpu) == (99, "1")


def test_an_init_failed_reply_returns_the_error_and_the_worker_never_gets_ready(handle):
    fresh = RayActorHandle(handle.info, handle.actor, handle.node, handle.logs, False)
    assert fresh.started(WorkerInitFailed("Traceback ...", 99, None)) == "Traceback ..."
    assert fresh.slot.state is WorkerState.STARTING
    assert fresh.info.pid == 99


# Calls ----------------------------------------------------------------------------------------------------


def test_what_was_submitted_goes_out_in_calls_that_double_from_one(handle):
    refs = sent(handle, *range(10))

    assert [[index for index, _, _ in call] for call in handle.actor.run_many.made] == [
        [0],
        [1, 2],
        [3, 4, 5, 6],
        [7, 8, 9],
    ]
    assert handle.outbox == []
    assert [handle.slot.held[i].ref for i in (0, 1, 3, 9)] == [refs[0], refs[1], refs[2], refs[3]]
    assert handle.refs() == refs  # one ref per call


def test_what_is_submitted_while_a_call_waits_behind_the_running_one_gathers_into_one_call(handle, fake_ray):
    first, _ = sent(handle, 0, 1, 2)  # [0] runs, [1, 2] waits behind it

    assert sent(handle, 3) == []  # the actor is not about to run dry
    submit(handle, 4, 5)
    fake_ray.results = {first: [(0, ok(1))]}
    list(handle.results(first))  # [1, 2] runs now

    assert len(handle.send(set())) == 1
    assert [index for index, _, _ in handle.actor.run_many.made[-1]] == [3, 4, 5]


def test_calls_grow_up_to_call_max(handle):
    sent(handle, *range(4 * CALL_MAX))

    sizes = [len(call) for call in handle.actor.run_many.made]
    assert max(sizes) == CALL_MAX
    assert sizes[:3] == [1, 2, 4]
    assert sum(sizes) == 4 * CALL_MAX


def test_a_mini_batch_a_loss_could_not_blame_goes_in_a_call_of_its_own(handle):
    handle.call_size = CALL_MAX

    sent(handle, 0, 1, 2, 3, 4, alone={2, 3})

    assert [[index for index, _, _ in call] for call in handle.actor.run_many.made] == [[0, 1], [2], [3], [4]]


def test_the_first_call_starts_at_once_the_next_when_it_returned(handle, clock, fake_ray):
    first, second = sent(handle, 0, 1, 2)  # calls [0] and [1, 2]
    assert (handle.slot.running, handle.slot.deadline) == (0, T0 + 5)
    fake_ray.results = {first: [(0, ok(1))]}
    clock.now = T0 + 1

    taken = [(held.index, outcome.items) for held, outcome in handle.results(first)]

    assert taken == [(0, 1)]
    # A call of two: which one runs is not known; the call may take the sum of their timeouts.
    assert (handle.slot.running, handle.slot.call, handle.slot.deadline) == (None, second, T0 + 1 + 10)
    assert handle.slot.blame() is None


def test_results_come_in_order_up_to_the_call_that_is_done(handle, clock, fake_ray):
    refs = sent(handle, 0, 1, 2, 3)  # [0], [1, 2], [3]
    fake_ray.results = {refs[0]: [(0, ok(1))], refs[1]: [(1, ok(2)), (2, ok(3))]}
    clock.now = T0 + 2

    taken = [held.index for held, _ in handle.results(refs[1])]

    assert taken == [0, 1, 2]  # the first call's results were there too: Ray ran it first
    assert list(handle.slot.held) == [3]
    assert (handle.slot.running, handle.slot.deadline) == (3, T0 + 2 + 5)  # a call of one: that one runs
    assert handle.refs() == [refs[2]]


# What the actor says --------------------------------------------------------------------------------------


def test_a_mini_batch_said_to_run_is_timed_from_its_start_and_blamed(handle, clock, fake_ray):
    handle.call_size = CALL_MAX
    (call,) = sent(handle, 0, 1, 2, 3)
    clock.now = T0 + 3

    assert handle.slot.told_running(2, 1, clock.now - 1.0)  # WorkerRunning(2, 1, elapsed=1.0)

    assert (handle.slot.running, handle.slot.deadline, handle.slot.blame()) == (2, T0 + 2 + 5, 2)
    assert handle.slot.unattributed() == []
    with pytest.raises(RayActorError):  # the actor died in it: 0 and 1 ended, unreported; 3 never started
        list(handle.results(call))
    assert handle.slot.blame() == 2


def test_the_end_of_one_said_to_run_brings_the_results_before_it_and_the_rest_runs_from_then(handle, clock, fake_ray):
    handle.call_size = CALL_MAX
    (call,) = sent(handle, 0, 1, 2, 3)
    handle.slot.told_running(1, 1, T0)
    clock.now = T0 + 4

    done = handle.ended(WorkerEnded(1, 1, [(0, ok(10)), (1, ok(11))]))

    assert [(held.index, outcome.items) for held, outcome in done] == [(0, 10), (1, 11)]
    assert (handle.slot.running, handle.slot.deadline, handle.slot.unattributed()) == (None, T0 + 4 + 10, [2, 3])
    fake_ray.results = {call: [(0, ok(10)), (1, ok(11)), (2, ok(12)), (3, ok(13))]}
    assert [held.index for held, _ in handle.results(call)] == [2, 3]  # not 0 and 1 again
    assert (handle.slot.held, handle.slot.deadline) == ({}, None)


def test_an_end_told_after_its_call_returned_is_stale(handle, fake_ray):
    handle.call_size = CALL_MAX
    (call,) = sent(handle, 0, 1)
    handle.slot.told_running(0, 1, T0)
    fake_ray.results = {call: [(0, ok(1)), (1, ok(2))]}
    list(handle.results(call))
    sent(handle, 0, attempt=2)  # its retry, say

    assert handle.ended(WorkerEnded(0, 1, [(0, ok(1))])) == []
    assert handle.slot.holds(0, 2)


def test_an_actor_that_died_in_a_call_nothing_named_blames_none_and_names_the_call(handle, fake_ray):
    refs = sent(handle, 0, 1, 2, 3, 4, 5, 6)  # [0], [1, 2], [3, 4, 5, 6]
    fake_ray.results = {refs[0]: [(0, ok(1))]}

    results = handle.results(refs[2])
    assert next(results)[0].index == 0
    with pytest.raises(RayActorError):
        next(results)
    handle.died_after(1)  # the mailbox has the end of call 1 only

    assert handle.slot.blame() is None
    assert handle.slot.unattributed() == [1, 2]  # the call that ran; the one behind it never started


def test_a_call_that_ended_but_whose_reply_was_lost_is_not_blamed(handle, fake_ray):
    """Ray may lose a call's reply when the actor dies a moment after: the mailbox's note of its end says the
    actor ran the next call."""
    _, second, _ = sent(handle, 0, 1, 2, 3)  # [0], [1, 2], [3]: the reply of [0] never comes

    with pytest.raises(RayActorError):
        list(handle.results(second))
    assert handle.slot.blame() == 0  # as the books have it, until the actor's last words are read
    handle.died_after(1)

    assert (handle.slot.blame(), handle.slot.unattributed()) == (None, [1, 2])
    assert handle.slot.holds(0, 1)  # unreported: the driver runs it again, counting no attempt


def test_on_the_drivers_machine_the_actors_note_file_says_which_calls_ended(handle, fake_ray, tmp_path):
    """The same lost reply, the actor on the driver's machine: it noted the call's end in its file, not in the
    mailbox (which then says none)."""
    handle.ends_path = str(tmp_path / "node0-process000.ended")
    notes = FileEnds(handle.ends_path)
    _, second, _ = sent(handle, 0, 1, 2, 3)  # [0], [1, 2], [3]: the reply of [0] never comes
    notes.note(1)

    with pytest.raises(RayActorError):
        list(handle.results(second))
    handle.died_after(0)

    assert (handle.slot.blame(), handle.slot.unattributed()) == (None, [1, 2])


def test_a_note_file_holds_the_last_call_noted_and_starts_again_with_each_actor(tmp_path):
    path = str(tmp_path / "node0-process000.ended")
    assert last_ended(path) == 0  # no file: no call ended

    notes = FileEnds(path)
    assert last_ended(path) == 0
    notes.note(1)
    notes.note(12)
    assert last_ended(path) == 12

    FileEnds(path)  # a resumed run's worker of the same name
    assert last_ended(path) == 0


def test_an_actor_whose_note_file_cannot_be_made_notes_in_the_mailbox_and_an_unreadable_one_says_none(tmp_path):
    assert isinstance(
        ends_for(str(tmp_path / "gone" / "node0-process000.ended"), None, "node0/process000"), MailboxEnds
    )
    assert isinstance(ends_for(None, None, "node0/process000"), MailboxEnds)  # on another machine
    assert last_ended(str(tmp_path)) == 0  # a folder: the loss blames the call whose reply did not come


def test_after_a_lost_reply_the_only_mini_batch_of_the_next_call_is_blamed(handle, fake_ray):
    _, second = sent(handle, 0, 1)  # [0], [1]

    with pytest.raises(RayActorError):
        list(handle.results(second))
    handle.died_after(1)

    assert handle.slot.blame() == 1


def test_an_actor_that_ended_every_call_it_was_given_died_between_calls(handle, fake_ray):
    sent(handle, 0, 1)
    handle.died_after(2)

    assert (handle.slot.blame(), handle.slot.unattributed()) == (None, [])


def test_one_said_to_run_stays_blamed_when_the_actor_died_in_its_call(handle):
    handle.call_size = CALL_MAX
    sent(handle, 0, 1, 2)
    handle.slot.told_running(1, 1, T0)

    handle.died_after(0)

    assert handle.slot.blame() == 1


# Time-outs ------------------------------------------------------------------------------------------------


def test_a_time_out_kills_after_the_actors_own_dump_and_its_grace(handle, clock):
    sent(handle, 4, timeout=2.0)
    clock.now = T0 + 2

    handle.time_out(clock.now)

    slot = handle.slot
    assert (slot.loss, slot.state, slot.blame()) == (LossReason.TIMED_OUT, WorkerState.STOPPING, 4)
    assert slot.kill_at == T0 + 2 + DUMP_DELAY_S + DUMP_GRACE_S
    assert "run() exceeded 2 s on mini-batch 4; stacks of every thread:" in handle.logs.error.read_text()


def test_a_call_past_the_sum_of_its_timeouts_is_timed_out_blaming_none(handle, clock):
    handle.call_size = CALL_MAX
    sent(handle, 0, 1, 2, timeout=2.0)
    clock.now = T0 + 6

    handle.time_out(clock.now)

    slot = handle.slot
    assert (slot.loss, slot.blame(), slot.unattributed()) == (LossReason.TIMED_OUT, None, [0, 1, 2])
    assert "3 mini-batches of one call exceeded the sum of their run() timeouts (6 s)" in handle.logs.error.read_text()
