"""`parallel-steps node STEP.yaml`: the one command every node of a multi-node job runs (DESIGN.md section 5).

The main node starts the Ray head, waits (bounded) for the other nodes, runs the step
on that cluster and exits with the step's status, which is the job's. Every other node
joins as a Ray worker node and exits once the head is gone, so nothing outlives the
job. Node index, node count and the main node's address come from AWS Batch
multi-node parallel jobs, Slurm, Kubernetes indexed Jobs, or flags.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, InputError, ParallelStepsError, StepFailed, first_line
from .pool.ray_env import NODE_INDEX_LABEL, agree_on_token_auth

_PROBE_EVERY_S = 1.0
_HEAD_GONE_PROBES = 5  # consecutive failed probes of the head before a worker node stops
_JOIN_ATTEMPTS = 3  # `ray start` runs a worker node may need (the head can be slow to answer)
_HEAD_START_S = 120.0
_STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class _Topology:
    """Where this node sits in the job; `num_nodes` None means "the step's node_count"."""

    node_index: int
    num_nodes: int | None
    main_index: int
    main_address: str | None
    source: str

    @property
    def is_main(self) -> bool:
        return self.node_index == self.main_index


def main(argv: list[str]) -> int:
    """Run this node's part of a multi-node job; returns the exit status (0 ok, 1 failed, 2 usage)."""
    argv = list(argv)
    script_args: list[str] | None = None
    if "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    try:
        topology = _detect_topology(os.environ, args)
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


# Where am I? ------------------------------------------------------------------------------------


def _detect_topology(env: Any, args: argparse.Namespace) -> _Topology:
    """The scheduler's view of this node (AWS Batch, Slurm, Kubernetes), with flags taking precedence."""
    if "AWS_BATCH_JOB_NODE_INDEX" in env:
        found = _Topology(
            _int(env, "AWS_BATCH_JOB_NODE_INDEX"),
            _int(env, "AWS_BATCH_JOB_NUM_NODES"),
            _int(env, "AWS_BATCH_JOB_MAIN_NODE_INDEX", 0),
            env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"),
            "AWS Batch",
        )
    elif "SLURM_NODEID" in env:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        found = _Topology(
            _int(env, "SLURM_NODEID"),
            _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES"),
            0,
            _first_slurm_host(nodelist) if nodelist else None,
            "Slurm",
        )
    elif "JOB_COMPLETION_INDEX" in env:
        found = _Topology(_int(env, "JOB_COMPLETION_INDEX"), None, 0, None, "Kubernetes")
    else:
        found = _Topology(0, None, 0, None, "flags")
    topology = _Topology(
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


# The main node ----------------------------------------------------------------------------------


class _MainNode:
    """Ray head + driver: the job's result is the step's."""

    def __init__(self, args: argparse.Namespace, topology: _Topology, script_args: list[str] | None):
        self.args, self.topology, self.script_args = args, topology, script_args

    def run(self) -> int:
        config = self._config()  # a bad step file fails here, before anything starts
        num_nodes = self.topology.num_nodes or config.node_count
        address = self.args.node_address or _own_address(self.topology.main_address)
        gcs = f"{address}:{self.args.port}"
        head = _RayStart(
            ["--head", f"--port={self.args.port}", f"--node-ip-address={address}", "--include-dashboard=false"],
            self.topology.node_index,
            self.args.ray_start_args,
        )
        import ray

        from .driver import Cancel
        from .step import run_step

        self.cancel = cancel = Cancel()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda num, _: cancel.cancel(f"canceled ({signal.Signals(num).name})"))
        try:
            head.start()
            _wait_until(
                lambda: head.running() and _reachable(address, self.args.port),
                _HEAD_START_S,
                lambda: head.running(),
                lambda: f"the Ray head did not start on {gcs} ({head.log_hint()})",
            )
            ray.init(address=gcs, logging_level="WARNING", log_to_driver=False)
            self._wait_for_nodes(ray, num_nodes, head)
            overrides = dict(backend="ray", ray_address=gcs)
            if "node_count" not in self._set_fields():
                overrides["node_count"] = num_nodes
            try:
                summary, code = (
                    run_step(config.with_overrides(**overrides), run_dir=self.args.run_dir, cancel=cancel),
                    0,
                )
            except StepFailed as failed:
                summary, code = failed.summary, 1
            _print_summary(summary, self.args.json)
            return code
        finally:
            if ray.is_initialized():
                ray.shutdown()
            head.stop()

    def _set_fields(self) -> dict[str, str]:
        fields = {}
        for item in self.args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError("--set", f"{item!r} is not FIELD=VALUE")
            fields[key.strip().replace("-", "_")] = value
        return fields

    def _config(self):
        from .config import ParallelRunConfig

        overrides: dict[str, Any] = dict(self._set_fields())
        if self.script_args is not None:
            overrides["arguments"] = self.script_args
        return ParallelRunConfig.from_yaml(self.args.step_file, **overrides)

    def _wait_for_nodes(self, ray: Any, num_nodes: int, head: _RayStart) -> None:
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
            time.sleep(_PROBE_EVERY_S)
        print(f"parallel-steps node: {num_nodes} node(s) ready ({self.topology.source})", file=sys.stderr, flush=True)


# A worker node ----------------------------------------------------------------------------------


class _WorkerNode:
    """Joins the main node's Ray head and stays until the head is gone (the main node is done)."""

    def __init__(self, args: argparse.Namespace, topology: _Topology):
        self.args, self.topology = args, topology
        self.stopping = False

    def run(self) -> int:
        host, port = self.topology.main_address, self.args.port
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._stop)
        _wait_until(
            lambda: self.stopping or _reachable(host, port),
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
            node = _RayStart(options, self.topology.node_index, self.args.ray_start_args)
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

    def _watch(self, node: _RayStart, host: str, port: int) -> int | None:
        """Exit status once the head is gone (or we are stopped); None: Ray stopped with the head still up."""
        misses = 0
        while not self.stopping:
            time.sleep(_PROBE_EVERY_S)
            misses = 0 if _reachable(host, port) else misses + 1
            if misses >= _HEAD_GONE_PROBES:
                print(
                    f"parallel-steps node: the main node at {host}:{port} is done; leaving", file=sys.stderr, flush=True
                )
                return 0
            if not node.running():
                if misses:
                    return 0  # Ray stopped because the head went away
                # e.g. the head was too busy to answer in time: join again (a rejoined node can take
                # over the slots of a lost one)
                print(
                    f"parallel-steps node: ray start exited while the head is up ({node.log_hint()}); joining again",
                    file=sys.stderr,
                    flush=True,
                )
                return None
        return 128 + signal.SIGTERM

    def _stop(self, signum: int, frame: Any) -> None:
        self.stopping = True


# `ray start` as a child process ------------------------------------------------------------------


class _RayStart:
    """`ray start --block` owned by this process: stopped on exit, and killed with us (PDEATHSIG)."""

    def __init__(self, options: list[str], node_index: int, extra: str):
        self.command = [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--block",
            "--disable-usage-stats",
            f"--labels={NODE_INDEX_LABEL}={node_index}",
            *options,
            *shlex.split(extra),
        ]
        self.process: subprocess.Popen | None = None
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"parallel-steps-ray-start-{os.getpid()}.log"

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")  # the job is over: nothing to drain
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, preexec_fn=_die_with_parent
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM makes `ray start --block` stop every Ray process it started; SIGKILL after a grace."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)

    def log_hint(self) -> str:
        try:
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            tail = []
        return " | ".join(tail) or "no output"


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if this launcher dies, even by SIGKILL, so no Ray node is orphaned."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# Helpers -----------------------------------------------------------------------------------------


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=_PROBE_EVERY_S):
            return True
    except OSError:
        return False


def _wait_until(condition, timeout: float, keep_going, message) -> None:
    """Poll `condition` until it holds; fail with `message` (a string, or a callable made at failure)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline or not keep_going():
            raise ParallelStepsError(message() if callable(message) else message)
        time.sleep(_PROBE_EVERY_S / 4)


def _own_address(main_address: str | None) -> str:
    """This (main) node's IP: the main address when it names this machine, else the address Ray would pick."""
    if main_address:
        try:
            return socket.gethostbyname(main_address)
        except OSError:
            pass
    import ray

    return ray.util.get_node_ip_address()


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, default=str))
        return
    print(
        f"{summary['status']}: {summary['status_reason']}\n"
        f"  mini-batches: {summary['mini_batches_succeeded']} succeeded, {summary['mini_batches_failed']} failed, "
        f"of {summary['mini_batches_total']}\n"
        f"  output:       {summary.get('output_file') or summary.get('output')}\n"
        f"  logs:         {Path(summary['run_dir']) / 'logs'}"
    )
