"""The pool contract suite: every case on the local pool, then on the Ray pool.

The local half needs nothing but the core environment: Ray is neither imported nor started
until the first Ray case asks for the session's cluster (tests/ray_session.py). Without Ray
installed the Ray half is skipped, saying why.
"""

import pytest

from ray_session import excused_process, no_live_worker_actors, ray_cluster  # noqa: F401  (fixtures)


@pytest.fixture(scope="module", params=["local", "ray"])
def backend(request) -> str:
    """Every case on one pool, then on the other. Module-scoped, so the session's Ray cluster starts
    before any test's check for processes left behind begins."""
    if request.param == "ray":
        pytest.importorskip("ray", reason="the Ray half of the pool contract needs Ray (the `ray` extra)")
        request.getfixturevalue("ray_cluster")  # the Ray pool joins the Ray this process is connected to
    return request.param
