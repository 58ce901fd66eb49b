"""Task parameters -> one `ParallelRunConfig`, shared by the task, its cache policy and its run name.

A step is given as a `ParallelRunConfig`, a dict of fields or a step file, plus
config fields as keyword arguments (flow parameters); `None` means "not given".
"""

from __future__ import annotations

import os
from typing import Any

from ..config import ParallelRunConfig

CONFIG_PARAMETER = "parallel_run_config"
FIELDS_PARAMETER = "fields"  # the task's `**fields`, as Prefect binds it

StepSpec = ParallelRunConfig | dict[str, Any] | str | os.PathLike[str] | None


def step_config(parallel_run_config: StepSpec = None, **fields: Any) -> ParallelRunConfig:
    """The step's validated config: the base (config, dict or step YAML path) with `fields` overriding it.

    Raises:
        ConfigError: a field is invalid (one line naming it).
        InputError: the step file cannot be read.
    """
    overrides = {name: value for name, value in fields.items() if value is not None}
    if parallel_run_config is None:
        return ParallelRunConfig.from_dict(overrides)
    if isinstance(parallel_run_config, ParallelRunConfig):
        return parallel_run_config.with_overrides(**overrides)
    if isinstance(parallel_run_config, dict):
        return ParallelRunConfig.from_dict({**parallel_run_config, **overrides})
    return ParallelRunConfig.from_yaml(parallel_run_config, **overrides)


def config_from_parameters(parameters: dict[str, Any]) -> ParallelRunConfig:
    """The config of a `parallel_run` task run, from the parameters Prefect bound."""
    return step_config(parameters.get(CONFIG_PARAMETER), **(parameters.get(FIELDS_PARAMETER) or {}))
