"""What the workers of one run are given: each one's `WorkerSpec` (its logs and spool in the run
directory, the checked entry script, side inputs and models), the pool that starts them, and the
resource monitor that watches them. The step orchestrates; this is where a worker's setup is read.
"""

from __future__ import annotations

import contextlib
import logging

from ..config.model import ParallelRunConfig
from ..config.secrets import resolved_environment, secret_values
from ..host import THREAD_VARIABLES
from ..pool.base import WorkerPool, node_id_of
from ..pool.factory import make_pool
from ..protocol import WorkerSpec
from ..storage import options as storage_options
from ..store.output import spool_format
from ..store.rundir import RunDirectory
from .checks import Checked
from .monitor import ResourceMonitor


class RunWorkers:
    def __init__(self, config: ParallelRunConfig, checked: Checked, entry_callables: bytes | None, run: RunDirectory):
        self.config, self.checked, self.entry_callables, self.run = config, checked, entry_callables, run

    def pool(self) -> WorkerPool:
        """A new pool (local or Ray, by `backend`); secrets are resolved here, for the workers' environment only
        (the storage settings too: the run's, as the driver opens URLs with them)."""
        environment = {**resolved_environment(self.config), **storage_options.current().to_environment()}
        return make_pool(self.config, self.spec, environment)

    @staticmethod
    def log_threads(pool: WorkerPool, log: logging.Logger) -> None:
        """Say in the run's log how many threads each worker's math libraries use, when the pool sets them."""
        environment = pool.settings.environment
        set_here = [f"{name}={environment[name]}" for name in THREAD_VARIABLES if name in environment]
        if set_here:
            log.info(
                "%d worker(s) per node, threads per worker: %s (threads_per_worker; a variable the step or the "
                "environment sets wins)",
                pool.settings.process_count_per_node,
                ", ".join(set_here),
            )

    def spec(self, node_index: int, node_id: str, process_name: str) -> WorkerSpec:
        config, run = self.config, self.run
        logs = run.logs.worker(node_id, process_name)
        return WorkerSpec(
            node_id=node_id,
            process_name=process_name,
            logs=logs,
            parts_dir=str(run.parts),
            output_dir=str(run.output_dir),
            output_format=spool_format(config.output_format, config.append_row_dataframe_header),
            append_row=config.output_action == "append_row",
            entry_script=str(self.checked.entry_script) if self.checked.entry_script else None,
            entry_callables=self.entry_callables,
            source_directory=config.source_directory,
            arguments=self.checked.arguments,
            side_inputs=self.checked.side_inputs,
            models=self.checked.models,
            metrics_log=str(logs.metrics),
            logging_level=config.logging_level,
            profile=config.profiling_module == "cProfile",
            fingerprint_mode=config.reuse_fingerprint,
            read_ahead=config.read_ahead_bytes if config.reads_ahead else 0,
            max_concurrency=config.max_concurrency_per_worker,
        )

    def monitor(self, pool: WorkerPool, log: logging.Logger) -> contextlib.AbstractContextManager[object]:
        """The resource monitor over the pool's processes (`resource_monitor_interval`; 0: none); the run's log
        first says how many threads each worker's math libraries use."""
        self.log_threads(pool, log)
        interval = self.config.resource_monitor_interval
        if not interval:
            return contextlib.nullcontext()
        nodes = [node_id_of(i) for i in range(self.config.node_count)]
        secrets = secret_values(self.config)
        return ResourceMonitor(self.run.logs, nodes, pool.processes, interval, self.run.path, secrets)
