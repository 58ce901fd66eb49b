"""The Ray suite: one simulated multi-node Ray cluster for the whole session (ray.cluster_utils.Cluster).

The shared leftover-process check (tests/conftest.py) excuses only the session cluster's own
processes (raylets, agents, pooled idle workers it starts); anything else a test starts must be
gone, and no parallel-steps worker actor of a finished run may still be alive in the cluster.
"""

import time

import psutil
import pytest
from support import NODE_ARGS, OUR_ACTORS

_SESSION = {"pids": set(), "dashboard": None}  # the session cluster's processes and state API address


def _title(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@pytest.fixture(scope="session")
def ray_cluster():
    """Head + one worker node, each with 1 CPU and 2 logical GPUs; this process is a driver on the head."""
    from ray.cluster_utils import Cluster

    import ray

    cluster = Cluster(initialize_head=True, head_node_args=dict(NODE_ARGS, include_dashboard=True))
    cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes()
    context = ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    _SESSION["pids"] = {p.pid for p in psutil.Process().children(recursive=True)}
    _SESSION["dashboard"] = f"http://{context.dashboard_url}"
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    _SESSION.update(pids=set(), dashboard=None)


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
    """After each test the session cluster reports no ALIVE actor of ours, from any driver."""
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
