"""The end of a Ray run's workers: shutdown() on idle actors within a grace, then every actor and the
mailbox killed, and the run's side-input copies removed from the nodes.

Apart from the pool's loop because none of it supervises: it runs once, after the loop, and each
wait is bounded so that closing returns whatever the entry script or a node does.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray

from ...store.logs import note_error
from ..slots import DUMP_GRACE_S, WorkerState, shutdown_cut_off_detail
from .actor import remove_side_inputs
from .handle import RayActorHandle
from .nodes import RayNode
from .watch import DUMP_DELAY_S

_STOP_WAIT_S = 10.0


def stop_actors(handles: list[RayActorHandle], mailbox: Any, grace: float, cut_off: list[str]) -> None:
    """Run shutdown() on idle actors (none when `grace` is 0), kill every actor and the mailbox, and wait
    (bounded) until Ray has really ended them, so no worker outlives the run. The ids of workers whose
    shutdown() did not finish in time go to `cut_off`."""
    idle = [h for h in handles if h.slot.state is WorkerState.READY and not h.slot.held] if grace > 0 else []
    stopping = {handle.actor.shutdown.remote(grace): handle for handle in idle}
    if stopping:
        # An actor whose shutdown() overruns dumps its stacks DUMP_DELAY_S after `grace`, then has DUMP_GRACE_S.
        timeout = grace + DUMP_DELAY_S + DUMP_GRACE_S
        _, pending = ray.wait(list(stopping), num_returns=len(stopping), timeout=timeout)
        for ref in pending:
            cut_off.append(stopping[ref].info.id)
            note_error(stopping[ref].logs, f"{shutdown_cut_off_detail(grace)} (its stacks are above)")
    for handle in handles:
        handle.kill()
    if mailbox is not None:
        ray.kill(mailbox)
    gone = [handle.actor.__ray_ready__.remote() for handle in handles]
    ray.wait(gone, num_returns=len(gone), timeout=_STOP_WAIT_S)


def remove_side_input_copies(nodes: Iterable[RayNode], root: Path) -> None:
    """Remove this run's side-input copies (under `root`) from every node still in the cluster."""
    remove = ray.remote(remove_side_inputs)
    refs = [
        remove.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node.ray_id, soft=False)).remote(
            root
        )
        for node in nodes
        if not node.lost
    ]
    ray.wait(refs, num_returns=len(refs), timeout=_STOP_WAIT_S)
