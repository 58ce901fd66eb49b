"""Which Ray node serves which node index of the step, and what happens when one leaves.

Nodes labelled by `parallel-steps node` are taken by their label, then the driver's
own node, then the rest by address. The slots of a node that left the cluster
wait until a node outside the job joins, then start there.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

from ray.exceptions import ActorUnschedulableError

import ray

from ...cluster.access import NODE_INDEX_LABEL
from ...errors import ConfigError
from ..base import node_id_of

_POLL_S = 1.0
_REBIND_EVERY_S = 2.0  # how often slots of a lost node look for a node that joined since

log = logging.getLogger(__name__)


@dataclass
class RayNode:
    """A Ray node serving one node index; `lost` once it left the cluster."""

    index: int
    ray_id: str
    address: str
    gpus: int
    lost: bool = False
    gpu_workers: int = 0  # workers holding a share of a GPU

    def take_gpu(self, workers_per_gpu: int) -> bool:
        """Reserve a share of one of the node's GPUs (1/workers_per_gpu) for a new worker; False when none is left."""
        gpu = self.gpu_workers < self.gpus * workers_per_gpu
        self.gpu_workers += gpu
        return gpu

    def give_back_gpu(self) -> None:
        """A worker that had a GPU share ended: Ray hands it to the replacement (unless the node left)."""
        if not self.lost:
            self.gpu_workers -= 1


class RayNodes:
    """The step's nodes on the Ray cluster, by node index."""

    def __init__(self) -> None:
        self.by_index: dict[int, RayNode] = {}
        self.here: set[str] = set()  # addresses of this machine's Ray node(s)
        self._waiting: list[tuple[int, int]] = []  # (node index, slot) of lost nodes
        self._next_rebind = 0.0

    def assign(self, wanted: int, wait_s: float) -> None:
        """Pick `wanted` Ray nodes, waiting up to `wait_s` for enough to join."""
        deadline = time.monotonic() + wait_s
        while len(nodes := eligible_nodes()) < wanted:
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait_s:g} s" if wait_s else ""
                raise ConfigError(
                    "node_count",
                    f"{wanted} nodes asked for, but the Ray cluster has {len(nodes)} alive "
                    f"node(s) that can take workers{waited}",
                    "start more nodes, or lower node_count",
                )
            time.sleep(_POLL_S)
        for index, node in enumerate(nodes[:wanted]):
            self.by_index[index] = _node(index, node)
        self.here = {ray.util.get_node_ip_address()}

    def __getitem__(self, index: int) -> RayNode:
        return self.by_index[index]

    def died(self, node: RayNode, exc: BaseException) -> bool:
        """Whether an actor error means its node left the cluster (then the node is marked lost)."""
        if (
            isinstance(exc, ActorUnschedulableError)
            or "its node has died" in str(exc)
            or not any(n["NodeID"] == node.ray_id and n["Alive"] for n in ray.nodes())
        ):
            node.lost = True
        return node.lost

    def wait_for_spare(self, index: int, slot: int) -> None:
        self._waiting.append((index, slot))
        self._next_rebind = 0.0

    def next_rebind(self) -> float | None:
        return self._next_rebind if self._waiting else None

    def rebind(self, now: float) -> list[tuple[int, int]]:
        """Slots (node index, slot) whose lost node now has a replacement node: start them there."""
        if not self._waiting or now < self._next_rebind:
            return []
        self._next_rebind = now + _REBIND_EVERY_S
        used = {node.ray_id for node in self.by_index.values()}
        spares = [node for node in eligible_nodes() if node["NodeID"] not in used]
        ready = []
        for index in sorted({index for index, _ in self._waiting}):
            if not spares:
                break
            fresh = self.by_index[index] = _node(index, spares.pop(0))
            log.warning("node %s now runs on Ray node %s (%s)", node_id_of(index), fresh.ray_id, fresh.address)
            ready += [(i, slot) for i, slot in self._waiting if i == index]
            self._waiting = [(i, slot) for i, slot in self._waiting if i != index]
        return ready


def eligible_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes that take workers (a head started with num-cpus 0 does not), in node-index order:
    nodes labelled by `parallel-steps node` by their label, then the driver's node, then by address."""
    here = ray.get_runtime_context().get_node_id()

    def order(node: dict[str, Any]) -> tuple[int, bool, str, str]:
        label = (node.get("Labels") or {}).get(NODE_INDEX_LABEL)
        return (
            int(label) if label and label.isdigit() else sys.maxsize,
            node["NodeID"] != here,
            node["NodeManagerAddress"],
            node["NodeID"],
        )

    nodes = [node for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    return sorted(nodes, key=order)


def _node(index: int, node: dict[str, Any]) -> RayNode:
    return RayNode(index, node["NodeID"], node["NodeManagerAddress"], int(node["Resources"].get("GPU", 0)))
