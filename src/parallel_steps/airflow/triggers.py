"""`ParallelRunTrigger`: what a deferred `ParallelRunOperator` waits on in the triggerer.

The step's driver runs elsewhere (a Ray job, `submit_to: ray_job`), so no worker slot is
held while it runs: the trigger reads the run's status every few seconds in the triggerer's
event loop (file reads and Jobs API calls on a worker thread), writes progress lines to the
task log, and fires once the run has ended. The task then resumes in `execute_complete`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ..jobs import Follower
from .hooks import RayClusterHook
from .task_log import TaskLog


class ParallelRunTrigger(BaseTrigger):
    """Fires `{"run_dir": ..., "status": ...}` when the run in `run_dir` has ended.

    Args:
        run_dir: the run directory (on storage the triggerer mounts at the same path).
        poll_interval: seconds between two reads of the run's status.
        progress_log_interval: seconds between two progress lines in the task log.
        ray_conn_id: the task's `ray_cluster` connection (its id: the token is read in the triggerer).
    """

    def __init__(
        self,
        run_dir: str,
        poll_interval: float = 5.0,
        progress_log_interval: float = 10.0,
        ray_conn_id: str | None = None,
    ):
        super().__init__()
        self.run_dir, self.poll_interval, self.progress_log_interval = run_dir, poll_interval, progress_log_interval
        self.ray_conn_id = ray_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            dict(
                run_dir=self.run_dir,
                poll_interval=self.poll_interval,
                progress_log_interval=self.progress_log_interval,
                ray_conn_id=self.ray_conn_id,
            ),
        )

    def _follower(self) -> Follower:
        return Follower(self.run_dir, TaskLog(self.log, self.progress_log_interval), interval=self.poll_interval)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.ray_conn_id:
            await RayClusterHook(self.ray_conn_id).agrant()
        summary = await self._follower().wait_async()
        yield TriggerEvent({"run_dir": self.run_dir, "status": summary["status"]})

    async def on_kill(self) -> None:
        """The user marked the deferred task failed or succeeded, or cleared it: cancel the run (its
        Ray job is stopped). A triggerer restart does not call this; the run goes on."""
        if self.ray_conn_id:
            await RayClusterHook(self.ray_conn_id).agrant()
        await asyncio.to_thread(self._follower().cancel, "the deferred Airflow task was killed (on_kill)")
