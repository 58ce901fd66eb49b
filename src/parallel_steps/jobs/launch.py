"""Where a step's driver runs, decided in one place, and starting it there: the step API, the CLI,
the Airflow operator and the Prefect task all launch through `Launcher`.

    where(config, background)   submit_to: local             submit_to: ray_job
    run()   (to the end)        local: run_step, here        ray_job: jobs/ray_job.py, then followed
    start() (returns at once)   detached: jobs/detached.py        ray_job: jobs/ray_job.py

As in Kedro's `AbstractRunner.run`, what every way shares is here once (the checks before
anything starts, the run directory, no trace left by a user error) and each way only starts
the driver (`_STARTERS`). A run started elsewhere is followed by jobs/follow.py.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ..config.model import ParallelRunConfig
from ..errors import ConfigError
from ..run.checks import check_inputs
from ..run.step import run_step
from ..store.runs import new_run_id, read_ray_job, read_summary
from ..store.space import refusals_told
from ..summary import RunSummary
from . import detached
from .follow import Follower, RunHooks, when_set

#: local: the driver in this process; detached: a process on this machine; ray_job: a Ray job on the cluster.
Where = Literal["local", "detached", "ray_job"]
Starter = Callable[[ParallelRunConfig, Path, str, bytes | None], None]


def where(config: ParallelRunConfig, background: bool = False) -> Where:
    """Where the driver of `config` runs: `submit_to` says on which machine, `background` whether the
    caller waits for a driver on its own machine (it does not for a detached run)."""
    if config.submit_to == "ray_job":
        return "ray_job"
    return "detached" if background else "local"


def _start_ray_job(config: ParallelRunConfig, run_dir: Path, run_id: str, entry_callables: bytes | None) -> None:
    from .ray_job import submit_or_attach  # Ray is imported only by runs that use it

    submit_or_attach(config, run_dir, run_id, entry_callables)


_STARTERS: dict[Where, Starter] = {"detached": detached.start, "ray_job": _start_ray_job}


class Launcher:
    """One run of a step, to be launched where its config says.

    Args:
        config: the step's configuration.
        run_dir: the run directory; a rerun in the same directory resumes it (default: a new one
            under the run root).
        run_id: the id of a new run (default: generated from the step name).
        entry_callables: cloudpickled entry functions (`shipping.ship_functions`) instead of the script.

    Raises:
        ConfigError: both an entry script and entry functions are given.
    """

    def __init__(
        self,
        config: ParallelRunConfig,
        *,
        run_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        entry_callables: bytes | None = None,
    ):
        if entry_callables is not None and config.entry_script:
            raise ConfigError("entry_script", "is not run when entry functions (run=) are given", "give one of them")
        self.config, self.run_dir, self.run_id, self.entry_callables = config, run_dir, run_id, entry_callables

    @property
    def elsewhere(self) -> bool:
        """Whether `run()` follows a driver that runs elsewhere instead of running it in this process."""
        return where(self.config) != "local"

    def run(self, hooks: RunHooks | None = None, cancel: threading.Event | None = None) -> RunSummary:
        """Run the step to its end and return its summary: the driver in this process, or started
        elsewhere and followed (`hooks.launched` is told first).

        Args:
            hooks: where progress, events and warnings go.
            cancel: set it to cancel the run (a driver elsewhere is asked once).

        Raises:
            ConfigError, InputError: before anything starts.
            WriteRefused: the disk refused a write before the run had a summary.
            StepFailed: the run ended Failed or Canceled; `.summary` is its summary.
        """
        if not self.elsewhere:
            return run_step(
                self.config,
                run_dir=self.run_dir,
                run_id=self.run_id,
                on_progress=hooks.progress if hooks else None,
                on_event=hooks.event if hooks else None,
                cancel=cancel,
                entry_callables=self.entry_callables,
            )
        return self.follow(hooks).result(stop=when_set(cancel))

    def follow(self, hooks: RunHooks | None = None) -> Follower:
        """Start the driver elsewhere (`start`) and return the follower of its run, once `hooks.launched`
        has been told where it runs (an engine that hands the waiting off does so there)."""
        run_dir = self.start()
        follower = Follower(run_dir, hooks)
        follower.hooks.launched(follower, describe(run_dir))
        return follower

    def start(self) -> Path:
        """Start the driver in the background (a detached process, or the run's Ray job: when that job
        is still running, this attaches to it) and return the run directory at once.

        Everything that can be checked is checked first, so a bad config or a missing input raises
        here instead of failing in the background.
        """
        check_inputs(self.config, self.entry_callables)
        with refusals_told(self.config.resolved_run_root()):
            return self._start()

    def _start(self) -> Path:
        given = Path(self.run_dir).absolute() if self.run_dir else None
        # A run directory given again is the same run (its Ray job is found by its id): keep the id it has.
        earlier = (read_summary(given) or {}).get("run_id") if given else None
        run_id = self.run_id or earlier or new_run_id(self.config.name)
        folder = given or self.config.resolved_run_root() / run_id
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        try:
            _STARTERS[where(self.config, background=True)](self.config, folder, run_id, self.entry_callables)
        except ConfigError:  # nothing runs: leave no trace
            if created:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder


def describe(run_dir: Path) -> str:
    """Where a started driver runs, in words for a log."""
    ray_job = read_ray_job(run_dir)
    return f"the driver runs as Ray job {ray_job['submission_id']}" if ray_job else "the driver runs in the background"
