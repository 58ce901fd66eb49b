"""`ParallelRunStep`, the step as Azure ML's SDK spells it: a configuration plus the step's data (or its
functions), run with `.run()` or started in the background with `.submit()` (both through jobs/launch.py).
"""

from __future__ import annotations

from typing import Any

from .config import ParallelRunConfig, layered_config
from .jobs import Launcher, RunHandle
from .summary import RunSummary
from .worker.shipping import EntryFunction, ship_functions


class ParallelRunStep:
    """A ParallelRunStep: a configuration plus the step's data, run with `.run()`.

    Args:
        name: the step name.
        parallel_run_config: a `ParallelRunConfig` (or pass its fields as keywords).
        inputs, output, side_inputs, arguments, allow_reuse: as in ParallelRunStep.
        run, init, shutdown: functions to run instead of an `entry_script` (`run(mini_batch)` is
            required, `init()` and `shutdown()` run once per worker). A function the workers
            cannot import (defined in a notebook, a script or a flow file) travels by value.
        **fields: other configuration fields.

    Raises:
        ConfigError: a field is invalid, or a function cannot be shipped to the workers (the
            message names it).

    Example:
        >>> step = ParallelRunStep(name="score-digits", entry_script="score.py",
        ...                        inputs=["data/images"], output="out", mini_batch_size=10)
        >>> summary = step.run()
    """

    def __init__(
        self,
        name: str | None = None,
        parallel_run_config: ParallelRunConfig | None = None,
        inputs: Any = None,
        output: str | None = None,
        side_inputs: Any = None,
        arguments: list[Any] | None = None,
        allow_reuse: bool | None = None,
        *,
        run: EntryFunction | None = None,
        init: EntryFunction | None = None,
        shutdown: EntryFunction | None = None,
        **fields: Any,
    ):
        given = dict(
            name=name,
            inputs=inputs,
            output=output,
            side_inputs=side_inputs,
            arguments=arguments,
            allow_reuse=allow_reuse,
            **fields,
        )
        self.config = layered_config(parallel_run_config, given)
        self.entry_callables = ship_functions(run, init, shutdown)

    def run(self, **overrides: Any) -> RunSummary:
        """Run the step (with `overrides` applied) and return the run summary; raises StepFailed.
        With `submit_to: ray_job` the driver runs on the Ray cluster, and this waits for it."""
        return self._launcher(overrides).run()

    def submit(self, **overrides: Any) -> RunHandle:
        """Start the step in the background; returns a `RunHandle` (status, summary, wait, cancel, logs)."""
        return RunHandle(self._launcher(overrides).start())

    def _launcher(self, overrides: dict[str, Any]) -> Launcher:
        return Launcher(layered_config(self.config, overrides), entry_callables=self.entry_callables)
