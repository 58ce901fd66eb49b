"""Where this node sits in a multi-node job: its index, the node count and the main node's address,
from AWS Batch multi-node parallel jobs, Slurm, Kubernetes indexed Jobs, or flags (DESIGN.md section 5)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class Topology:
    """Where this node sits in the job; `num_nodes` None means "the step's node_count"."""

    node_index: int
    num_nodes: int | None
    main_index: int
    main_address: str | None
    source: str

    @property
    def is_main(self) -> bool:
        return self.node_index == self.main_index


def detect_topology(env: Any, args: argparse.Namespace) -> Topology:
    """The scheduler's view of this node (AWS Batch, Slurm, Kubernetes), with flags taking precedence."""
    if "AWS_BATCH_JOB_NODE_INDEX" in env:
        found = Topology(
            _index(env, "AWS_BATCH_JOB_NODE_INDEX"),
            _int(env, "AWS_BATCH_JOB_NUM_NODES"),
            _index(env, "AWS_BATCH_JOB_MAIN_NODE_INDEX"),
            env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"),
            "AWS Batch",
        )
    elif "SLURM_NODEID" in env:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        found = Topology(
            _index(env, "SLURM_NODEID"),
            _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES"),
            0,
            _first_slurm_host(nodelist) if nodelist else None,
            "Slurm",
        )
    elif "JOB_COMPLETION_INDEX" in env:
        found = Topology(_index(env, "JOB_COMPLETION_INDEX"), None, 0, None, "Kubernetes")
    else:
        found = Topology(0, None, 0, None, "flags")
    topology = Topology(
        node_index=args.node_index if args.node_index is not None else found.node_index,
        num_nodes=args.num_nodes if args.num_nodes is not None else found.num_nodes,
        main_index=args.main_index if args.main_index is not None else found.main_index,
        main_address=args.main_address or found.main_address or env.get("PARALLEL_STEPS_MAIN_ADDRESS"),
        source=found.source,
    )
    if topology.num_nodes is not None and not 0 <= topology.node_index < topology.num_nodes:
        raise ConfigError("--node-index", f"{topology.node_index} is not within the job's {topology.num_nodes} nodes")
    if not topology.is_main and not topology.main_address:
        raise ConfigError(
            "--main-address",
            f"node {topology.node_index} is not the main node and knows no main address",
            "pass --main-address or set PARALLEL_STEPS_MAIN_ADDRESS",
        )
    return topology


def _index(env: Any, name: str) -> int:
    """A node index from the scheduler's environment: an unset or empty one is 0."""
    return _int(env, name) or 0


def _int(env: Any, name: str, default: int | None = None) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(name, f"{value!r} is not a number") from None


def _first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list: `gpu[07-09,12],cpu1` -> `gpu07`."""
    first, depth = "", 0
    for char in nodelist:
        if char == "," and depth == 0:
            break
        depth += (char == "[") - (char == "]")
        first += char
    while "[" in first:
        prefix, rest = first.split("[", 1)
        ranges, suffix = rest.split("]", 1)
        first = prefix + ranges.split(",")[0].split("-")[0] + suffix
    return first
