"""The Ray suite: the session's simulated multi-node Ray cluster and its checks (tests/ray_session.py)."""

from ray_session import excused_process, no_live_worker_actors, ray_cluster  # noqa: F401  (fixtures)
