"""Task parameters -> one `ParallelRunConfig`, shared by the task, its cache policy and its run name.

A step is given as a `ParallelRunConfig`, a dict of fields or a step file, plus
config fields as keyword arguments (flow parameters); `None` means "not given"
(the layers are the core's, `config/layers.py`).
"""

from __future__ import annotations

from typing import Any

from ..config import ParallelRunConfig, StepSpec, layered_config
from .storage import with_blocks

CONFIG_PARAMETER = "parallel_run_config"
FIELDS_PARAMETER = "fields"  # the task's `**fields`, as Prefect binds it

__all__ = ["StepSpec", "config_from_parameters", "step_config"]


def step_config(parallel_run_config: StepSpec = None, **fields: Any) -> ParallelRunConfig:
    """The step's validated config: the base (config, dict or step YAML path) with `fields` overriding it.

    Raises:
        ConfigError: a field is invalid (one line naming it).
        InputError: the step file cannot be read.
    """
    return layered_config(parallel_run_config, with_blocks(fields))  # credentials blocks as storage options


def config_from_parameters(parameters: dict[str, Any]) -> ParallelRunConfig:
    """The config of a `parallel_run` task run, from the parameters Prefect bound."""
    return step_config(parameters.get(CONFIG_PARAMETER), **(parameters.get(FIELDS_PARAMETER) or {}))
