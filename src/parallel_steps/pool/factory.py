"""`make_pool(config, make_spec)`: the one place that turns a step's configuration into a worker pool."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from ..config.model import ParallelRunConfig
from ..host import THREAD_VARIABLES, default_process_count, gpu_ids, thread_budget
from ..protocol import WorkerSpec
from .base import PoolSettings, WorkerPool


def make_pool(
    config: ParallelRunConfig, make_spec: Callable[[int, str, str], WorkerSpec], environment: Mapping[str, str]
) -> WorkerPool:
    """The pool of `config.backend`, not yet started (use it as a context manager).

    Args:
        config: the step's configuration (node and process counts, limits, backend).
        make_spec: `(node_index, node_id, process_name) -> WorkerSpec` for each worker started.
        environment: the workers' extra environment variables, with their values resolved.
    """
    gpus = gpu_ids()
    per_node = config.process_count_per_node or len(gpus) * config.workers_per_gpu or default_process_count()
    settings = PoolSettings(
        node_count=config.node_count,
        process_count_per_node=per_node,
        make_spec=make_spec,
        environment={**thread_environment(config, per_node, environment), **environment},
        gpu_ids=gpus,
        workers_per_gpu=config.workers_per_gpu,
        max_concurrency=config.max_concurrency_per_worker,
        memory_limit=config.memory_limit_bytes,
        shutdown_timeout=config.shutdown_seconds,
    )
    if config.backend == "ray":
        from .ray.pool import RayWorkerPool  # Ray is imported only by runs that use it

        return RayWorkerPool(settings, config.ray_address, config.first_task_creation_timeout)
    from .local.pool import LocalWorkerPool

    return LocalWorkerPool(settings)


def thread_environment(config: ParallelRunConfig, per_node: int, environment: Mapping[str, str]) -> dict[str, str]:
    """The thread-count variables each worker gets (`threads_per_worker`, else on the local backend its share
    of the node's CPUs; Ray already gives an actor the threads of its CPUs), but for those the step's
    `environment` or this process's environment set, which win."""
    threads = config.threads_per_worker
    if threads is None and config.backend == "ray":
        return {}
    count = str(threads or thread_budget(per_node))
    return {name: count for name in THREAD_VARIABLES if name not in environment and name not in os.environ}
