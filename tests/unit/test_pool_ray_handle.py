"""One Ray actor as the Ray pool sees it (pool/ray_handle.py), against a fake actor, fake refs and a clock
the tests set. Ray is imported (the handle's module needs it), never started."""

import types

import pytest

pytest.importorskip("ray", reason="the Ray pool's handle needs Ray (the `ray` extra)")

from ray.exceptions import RayActorError

from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool import ray_handle
from parallel_steps.pool.ray_actor import DUMP_DELAY_S
from parallel_steps.pool.ray_handle import RayActorHandle
from parallel_steps.pool.ray_nodes import RayNode
from parallel_steps.pool.slots import DUMP_GRACE_S, WorkerState
from parallel_steps.protocol import LossReason, Outcome, WorkerInfo, WorkerInitFailed, WorkerReady
from parallel_steps.store.logs import RunLogs

T0 = 700.0


class Ref:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Ref({self.name})"


class Calls:
    """`actor.run.remote(...)`: returns a new ref and remembers the call."""

    def __init__(self):
        self.made = []

    def remote(self, *args):
        self.made.append(args)
        return Ref(f"run-{args[0].index}")


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
    actor = types.SimpleNamespace(run=Calls())
    logs = RunLogs(tmp_path / "run").worker("node0", "process000")
    handle = RayActorHandle(info, actor, RayNode(0, "ray-node", "10.0.0.1", 0), logs, False, start_ref=Ref("start"))
    handle.started(WorkerReady(321, None))
    handle.start_ref = None
    return handle


def mini_batch(index):
    return MiniBatch(index, "files", (f"f{index}",), None, 1, 1)


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


def test_the_first_mini_batch_sent_starts_at_once_the_next_waits_behind_it(handle, clock):
    first = handle.send(mini_batch(0), 1, 5.0)
    clock.now += 1
    second = handle.send(mini_batch(1), 2, 5.0)

    assert handle.actor.run.made == [(mini_batch(0), 1, 5.0), (mini_batch(1), 2, 5.0)]
    assert (handle.slot.running, handle.slot.deadline) == (0, T0 + 5)
    assert handle.refs() == [first, second]


def test_results_come_in_order_up_to_the_ref_that_is_done(handle, clock, fake_ray):
    refs = [handle.send(mini_batch(i), 1, 5.0) for i in range(3)]
    fake_ray.results = {refs[0]: Outcome(True, 1), refs[1]: Outcome(True, 2)}
    clock.now = T0 + 2

    taken = [(held.index, outcome.items) for held, outcome in handle.results(refs[1])]

    assert taken == [(0, 1), (1, 2)]  # 0's result was there too: Ray ran it first
    assert list(handle.slot.held) == [2]
    assert (handle.slot.running, handle.slot.deadline) == (2, T0 + 2 + 5)  # 2 started when 1 ended


def test_results_stop_at_the_ref_asked_for(handle, fake_ray):
    refs = [handle.send(mini_batch(i), 1, None) for i in range(2)]
    fake_ray.results = {refs[0]: Outcome(True, 1), refs[1]: Outcome(True, 2)}

    assert [held.index for held, _ in handle.results(refs[0])] == [0]
    assert handle.refs() == [refs[1]]


def test_an_actor_that_died_keeps_the_one_it_ran_to_blame(handle, fake_ray):
    refs = [handle.send(mini_batch(i), 1, None) for i in range(3)]
    fake_ray.results = {refs[0]: Outcome(True, 1)}  # 1 never returns: the actor died running it

    results = handle.results(refs[2])
    assert next(results)[0].index == 0
    with pytest.raises(RayActorError):
        next(results)

    assert handle.slot.blame() == 1  # the one behind it (2) goes back to the driver unstarted


def test_a_time_out_kills_after_the_actors_own_dump_and_its_grace(handle, clock):
    handle.send(mini_batch(4), 1, 2.0)
    clock.now = T0 + 2

    handle.time_out(clock.now)

    slot = handle.slot
    assert (slot.loss, slot.state, slot.blame()) == (LossReason.TIMED_OUT, WorkerState.STOPPING, 4)
    assert slot.kill_at == T0 + 2 + DUMP_DELAY_S + DUMP_GRACE_S
    assert "run() exceeded 2 s on mini-batch 4; stacks of every thread:" in handle.logs.error.read_text()
