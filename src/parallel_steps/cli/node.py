"""`parallel-steps node STEP.yaml`: the one command every node of a multi-node job runs (DESIGN.md section 5).

The main node starts the Ray head, waits (bounded) for the other nodes, runs the step
on that cluster and exits with the step's status, which is the job's. Every other node
joins as a Ray worker node and exits once the head is gone, so nothing outlives the
job. Where a node sits comes from node_topology.py; its Ray processes from ray_node.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from ..cluster.access import agree_on_token_auth
from ..errors import ConfigError, InputError, ParallelStepsError, StepFailed, first_line
from ..host import require_linux
from .common import cancel_on_signals, parse_set, print_summary, split_script_args
from .node_topology import Topology, detect_topology
from .ray_node import PROBE_EVERY_S, RayStart, own_address, reachable, wait_until

if TYPE_CHECKING:
    from ..config import ParallelRunConfig

_HEAD_GONE_PROBES = 5  # consecutive failed probes of the head before a worker node stops
_JOIN_ATTEMPTS = 3  # `ray start` runs a worker node may need (the head can be slow to answer)
_HEAD_START_S = 120.0


def main(argv: list[str]) -> int:
    """Run this node's part of a multi-node job; returns the exit status (0 ok, 1 failed, 2 usage)."""
    argv, script_args = split_script_args(list(argv))
    args = _parser().parse_args(argv)
    try:
        require_linux()
        topology = detect_topology(os.environ, args)
        agree_on_token_auth()
        # Joining nodes and the driver wait this long for a busy head (Ray's default is about 20 s).
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
        if topology.is_main:
            return _MainNode(args, topology, script_args).run()
        return _WorkerNode(args, topology).run()
    except ParallelStepsError as exc:
        print(f"parallel-steps node: {first_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, InputError)) else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parallel-steps node",
        description="Run on every node of a multi-node job: the main node starts the Ray head and runs STEP.yaml "
        "with backend ray; the other nodes join as Ray workers and exit when the main node is done. "
        "Node index, node count and main address come from AWS Batch (AWS_BATCH_JOB_*), Slurm "
        "(SLURM_NODEID, SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST), Kubernetes indexed Jobs "
        "(JOB_COMPLETION_INDEX) or the flags below. Arguments after -- go to the entry script.",
        epilog="Exit status: the main node's is the step's (0 succeeded, 1 failed, 2 invalid configuration); "
        "a worker node exits 0 once the main node is done, 1 if it could not join.",
    )
    parser.add_argument("step_file", metavar="STEP.yaml", help="the step file (read on the main node only)")
    parser.add_argument("--node-index", type=int, help="this node's index (default: from the scheduler, else 0)")
    parser.add_argument(
        "--num-nodes", type=int, help="nodes in the job (default: from the scheduler, else the step's node_count)"
    )
    parser.add_argument("--main-index", type=int, help="index of the main node (default: from the scheduler, else 0)")
    parser.add_argument(
        "--main-address",
        help="address of the main node (default: from the scheduler, else PARALLEL_STEPS_MAIN_ADDRESS)",
    )
    parser.add_argument("--node-address", help="this node's own address for Ray (default: Ray's choice)")
    parser.add_argument("--port", type=int, default=6379, help="port of the Ray head on the main node (default 6379)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a configuration field of the step (repeatable)",
    )
    parser.add_argument(
        "--wait-nodes",
        type=float,
        default=600,
        metavar="SECONDS",
        help="how long the main node waits for the other nodes to join (default 600)",
    )
    parser.add_argument(
        "--join-timeout",
        type=float,
        default=600,
        metavar="SECONDS",
        help="how long a worker node waits for the main node's Ray head (default 600)",
    )
    parser.add_argument(
        "--ray-start-args",
        default="",
        metavar="ARGS",
        help='extra arguments for `ray start` on this node, e.g. "--num-gpus 4"',
    )
    parser.add_argument("--run-dir", help="run directory (a rerun in the same directory resumes it)")
    parser.add_argument("--json", action="store_true", help="main node: print the run summary as one JSON object")
    return parser


# The main node ----------------------------------------------------------------------------------


class _MainNode:
    """Ray head + driver: the job's result is the step's."""

    def __init__(self, args: argparse.Namespace, topology: Topology, script_args: list[str] | None):
        self.args, self.topology, self.script_args = args, topology, script_args

    def run(self) -> int:
        config = self._config()  # a bad step file fails here, before anything starts
        num_nodes = self.topology.num_nodes or config.node_count
        address = self.args.node_address or own_address(self.topology.main_address)
        gcs = f"{address}:{self.args.port}"
        head = RayStart(
            ["--head", f"--port={self.args.port}", f"--node-ip-address={address}", "--include-dashboard=false"],
            self.topology.node_index,
            self.args.ray_start_args,
        )
        import ray

        from ..run import run_step

        self.cancel = cancel = cancel_on_signals()
        try:
            head.start()
            wait_until(
                lambda: head.running() and reachable(address, self.args.port),
                _HEAD_START_S,
                lambda: head.running(),
                lambda: f"the Ray head did not start on {gcs} ({head.log_hint()})",
            )
            ray.init(address=gcs, logging_level=logging.WARNING, log_to_driver=False)
            self._wait_for_nodes(ray, num_nodes, head)
            overrides: dict[str, Any] = dict(backend="ray", ray_address=gcs)
            if "node_count" not in parse_set(self.args.set):
                overrides["node_count"] = num_nodes
            try:
                summary, code = (
                    run_step(config.with_overrides(**overrides), run_dir=self.args.run_dir, cancel=cancel),
                    0,
                )
            except StepFailed as failed:
                summary, code = failed.summary, 1
            print_summary(summary, self.args.json)
            return code
        finally:
            if ray.is_initialized():
                ray.shutdown()
            head.stop()

    def _config(self) -> ParallelRunConfig:
        from ..config import ParallelRunConfig

        overrides: dict[str, Any] = parse_set(self.args.set)
        if self.script_args is not None:
            overrides["arguments"] = self.script_args
        return ParallelRunConfig.from_yaml(self.args.step_file, **overrides)

    def _wait_for_nodes(self, ray: Any, num_nodes: int, head: RayStart) -> None:
        deadline, reported = time.monotonic() + self.args.wait_nodes, -1
        while (alive := sum(node["Alive"] for node in ray.nodes())) < num_nodes:
            if alive != reported:
                print(
                    f"parallel-steps node: {alive} of {num_nodes} nodes in the Ray cluster; waiting",
                    file=sys.stderr,
                    flush=True,
                )
                reported = alive
            if self.cancel.is_set():
                raise ParallelStepsError(f"{self.cancel.reason} while waiting for the other nodes")
            if time.monotonic() >= deadline or not head.running():
                raise ParallelStepsError(
                    f"only {alive} of {num_nodes} nodes joined the Ray cluster at "
                    f"{self.topology.main_address or 'this node'} within "
                    f"{self.args.wait_nodes:g} s (see --wait-nodes)"
                )
            time.sleep(PROBE_EVERY_S)
        print(f"parallel-steps node: {num_nodes} node(s) ready ({self.topology.source})", file=sys.stderr, flush=True)


# A worker node ----------------------------------------------------------------------------------


class _WorkerNode:
    """Joins the main node's Ray head and stays until the head is gone (the main node is done)."""

    def __init__(self, args: argparse.Namespace, topology: Topology):
        self.args, self.topology = args, topology
        self.stopping = False

    def run(self) -> int:
        host, port = self.topology.main_address or "", self.args.port  # detect_topology demands one here
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._stop)
        wait_until(
            lambda: self.stopping or reachable(host, port),
            self.args.join_timeout,
            lambda: True,
            f"the main node's Ray head at {host}:{port} was not reachable within "
            f"{self.args.join_timeout:g} s (see --join-timeout)",
        )
        if self.stopping:
            return 128 + signal.SIGTERM
        options = [f"--address={host}:{port}"]
        if self.args.node_address:
            options.append(f"--node-ip-address={self.args.node_address}")
        for _ in range(_JOIN_ATTEMPTS):
            node = RayStart(options, self.topology.node_index, self.args.ray_start_args)
            node.start()
            try:
                code = self._watch(node, host, port)
            finally:
                node.stop()
            if code is not None:
                return code
        print(
            f"parallel-steps node: could not join the Ray head at {host}:{port} in {_JOIN_ATTEMPTS} attempts",
            file=sys.stderr,
            flush=True,
        )
        return 1

    def _watch(self, node: RayStart, host: str, port: int) -> int | None:
        """Exit status once the head is gone (or we are stopped); None: Ray stopped with the head still up."""
        misses = 0
        while not self.stopping:
            time.sleep(PROBE_EVERY_S)
            misses = 0 if reachable(host, port) else misses + 1
            if misses >= _HEAD_GONE_PROBES:
                print(
                    f"parallel-steps node: the main node at {host}:{port} is done; leaving", file=sys.stderr, flush=True
                )
                return 0
            if not node.running():
                if misses or self._head_leaving(host, port):
                    return 0  # Ray stopped because the head went away
                if self.stopping:
                    break
                # e.g. the head was too busy to answer in time: join again (a rejoined node can take
                # over the slots of a lost one)
                print(
                    f"parallel-steps node: ray start exited while the head is up ({node.log_hint()}); joining again",
                    file=sys.stderr,
                    flush=True,
                )
                return None
        return 128 + signal.SIGTERM

    def _head_leaving(self, host: str, port: int) -> bool:
        """Whether the head is gone within a few probes. When a step ends, this node's Ray can stop while
        the main node's head still answers for a moment (longer on a busy machine): that is the main node
        being done, not a reason to join again."""
        for _ in range(_HEAD_GONE_PROBES):
            time.sleep(PROBE_EVERY_S)
            if self.stopping:
                return False
            if not reachable(host, port):
                return True
        return False

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True
