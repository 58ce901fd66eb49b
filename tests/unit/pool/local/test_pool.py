"""What a pool does with a submit to a worker it has given up on, before the driver has seen the loss
(pool/base.py, on the local pool's books; no process is started)."""

import types

import pytest

from parallel_steps.inputs.minibatch import MiniBatch
from parallel_steps.pool.base import PoolSettings
from parallel_steps.pool.local.pool import LocalWorkerPool
from parallel_steps.pool.slots import Slot, WorkerState
from parallel_steps.protocol import WorkerInfo

WORKER = WorkerInfo(id="node0/process000", node_index=0, node_id="node0", process_name="process000", slot=0)


@pytest.fixture
def pool():
    pool = LocalWorkerPool(PoolSettings(1, 1, make_spec=None, environment={}, gpu_ids=[]))
    pool._open = True  # as inside `with pool:`, without starting workers
    return pool


def worker(pool, slot: Slot):
    handle = pool._handles[WORKER.id] = types.SimpleNamespace(info=WORKER, slot=slot, outbox=[])
    return handle


def mini_batch(index: int) -> MiniBatch:
    return MiniBatch(index, "files", (f"f{index}",), None, 1, 1)


def test_a_ready_worker_is_given_the_mini_batch(pool):
    handle = worker(pool, Slot(state=WorkerState.READY))
    pool.submit(WORKER, mini_batch(0), 1, 5.0)
    assert (list(handle.slot.held), handle.outbox) == ([0], [(mini_batch(0), 1, 5.0)])


@pytest.mark.parametrize("why", ["time_out", "over_memory"])
def test_a_worker_given_up_before_the_driver_saw_its_loss_takes_nothing_and_keeps_its_blame(pool, why):
    """The driver still counts it ready (its Lost comes with the kill, a dump grace later for a time-out): what
    it sends is not held, so the loss blames only the mini-batch the worker ran; the driver gives the rest to
    other workers."""
    slot = Slot(state=WorkerState.READY)
    slot.hold(3, 1, 2.0)
    slot.start(3, 100.0)
    if why == "time_out":
        slot.time_out(102.0)
    else:
        slot.over_memory(2**31, 2**30)
    handle = worker(pool, slot)

    pool.submit(WORKER, mini_batch(4), 1, 2.0)  # no error: a run must not fail on this race

    assert (list(slot.held), handle.outbox, slot.blame()) == ([3], [], 3)
