"""Prefect caching from the step's own reuse key (DESIGN.md section 6).

With `allow_reuse`, a `parallel_run` task run whose inputs, script and
result-affecting settings match an earlier successful one shows as Cached and
returns that run's summary; with `allow_reuse=False` nothing is cached.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext

from ..config.sections import OUTCOME_FIELDS
from ..errors import ParallelStepsError
from ..run import reuse_key
from .parameters import config_from_parameters


@dataclass
class StepReuse(CachePolicy):
    """Key a `parallel_run` task run on `reuse_key(config)`, its output folder and its thresholds.

    The output folder is part of the key because a cached run writes nothing: a
    step pointed at another folder must run (the step's own reuse then copies
    the earlier output there without starting a worker).
    """

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        try:
            config = config_from_parameters(inputs)
            if not config.allow_reuse:
                return None
            key = reuse_key(config)
        except ParallelStepsError:  # the task run itself reports it, as a user error
            return None
        output = str(Path(config.output).absolute()) if config.output else ""
        # `reuse_key` leaves out the thresholds, but a run that succeeded under a lenient one must not
        # come back Cached under a strict one.
        outcome = [getattr(config, name) for name in OUTCOME_FIELDS]
        return hashlib.sha256(f"{key}\0{output}\0{outcome}".encode()).hexdigest()


STEP_REUSE = StepReuse()
