"""One simulated multi-node Ray cluster per test session (ray.cluster_utils.Cluster), shared by the suites
that drive Ray pools in this process (tests/ray, and the Ray half of tests/contract).

Each suite's conftest imports these fixtures; the cluster starts when the first test asks for
`ray_cluster` and serves every suite of the session, so a suite that never asks starts none (nor
imports Ray). The shared leftover-process check (tests/conftest.py) excuses only the cluster's
own processes (raylets, agents, pooled idle workers it starts); anything else a test starts must be
gone, and no parallel-steps worker actor of a finished run may still be alive in the cluster.
"""

from __future__ import annotations

import time

import psutil
import pytest

#: Every simulated node: 1 CPU, 2 logical GPUs, a small object store (all nodes share this machine).
NODE_ARGS = dict(num_cpus=1, num_gpus=2, object_store_memory=100 * 2**20)
#: Actor class names of parallel-steps (none may be alive after a run).
OUR_ACTORS = ("ParallelStepsWorker", "Mailbox")

_SESSION = {"cluster": None, "pids": set(), "dashboard": None}  # the cluster, its processes, state API address


def _title(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@pytest.fixture(scope="session")
def ray_cluster():
    """Head + one worker node, each with 1 CPU and 2 logical GPUs; this process is a driver on the head.
    Started once per session whichever suite asks first; that suite's fixture stops it at the end."""
    if _SESSION["cluster"] is not None:
        yield _SESSION["cluster"]
        return
    from ray.cluster_utils import Cluster

    import ray

    cluster = Cluster(initialize_head=True, head_node_args=dict(NODE_ARGS, include_dashboard=True))
    cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes()
    context = ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    _SESSION.update(
        cluster=cluster,
        pids={p.pid for p in psutil.Process().children(recursive=True)},
        dashboard=f"http://{context.dashboard_url}",
    )
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    _SESSION.update(cluster=None, pids=set(), dashboard=None)


@pytest.fixture
def excused_process():
    """A process the session cluster started (e.g. a pooled idle Ray worker), unless it is one of our actors."""

    def excused(process: psutil.Process, before: set[int]) -> bool:
        try:
            under_cluster = any(parent.pid in _SESSION["pids"] for parent in process.parents())
        except psutil.Error:
            return True  # gone meanwhile
        return under_cluster and not any(name in _title(process) for name in OUR_ACTORS)

    return excused


@pytest.fixture(autouse=True)
def no_live_worker_actors():
    """After each test the session cluster (when one runs) reports no ALIVE actor of ours, from any driver."""
    yield
    if not _SESSION["dashboard"]:
        return
    deadline = time.monotonic() + 20
    while (alive := _alive_actors()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, f"worker actors still alive after the run: {alive}"


def _alive_actors() -> list[str]:
    from ray.util.state import list_actors

    # The address is explicit: `ray start` in other tests repoints Ray's "current cluster" file.
    alive = list_actors(address=_SESSION["dashboard"], filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
    return [f"{actor.class_name} pid {actor.pid}" for actor in alive if actor.class_name in OUR_ACTORS]
