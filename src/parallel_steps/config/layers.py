"""A step's one configuration from its layers: what every front end does before it launches a run.

    base       a ParallelRunConfig, a dict of fields, or the path of a step file (or a v2 job file)
    < fields   the front end's own keywords: ParallelRunStep's, the operator's, the task's, CLI options
    < trigger  trigger-time input, already vetted by `overrides.trigger_overrides`

Each layer overrides the one below it; a None value leaves the field as the layer below set it
(so flow parameters and operator keywords that default to None override only when given). The
layers are merged before the one validation, so a rule across fields (`submit_to: ray_job`
needs `backend: ray`) sees the result, not a half-built config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .model import ParallelRunConfig, config_of

#: What a front end takes as the base of a step.
StepSpec = ParallelRunConfig | Mapping[str, Any] | str | os.PathLike[str] | None


def layered_config(
    base: StepSpec = None,
    fields: Mapping[str, Any] | None = None,
    trigger: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
) -> ParallelRunConfig:
    """The validated config: `base`, then `fields`, then `trigger` (None values left out).

    Args:
        name: the step name when no layer sets one (Airflow: one made from the task id).

    Raises:
        ConfigError: a field is invalid (one line naming it).
        InputError: the step file cannot be read.
    """
    given = {key: value for layer in (fields or {}, trigger or {}) for key, value in layer.items() if value is not None}
    config = _over(base, given)
    if name is not None and "name" not in config.model_fields_set:
        config = config.with_overrides(name=name)
    return config


def _over(base: StepSpec, given: dict[str, Any]) -> ParallelRunConfig:
    if base is None:
        return ParallelRunConfig.from_dict(given)
    if isinstance(base, (str, os.PathLike)):
        return ParallelRunConfig.from_yaml(base, **given)
    try:  # itself, or an object a registered loader reads (an azure-ai-ml job, itself a Mapping: config/loaders.py)
        return config_of(base).with_overrides(**given)
    except TypeError:
        if isinstance(base, Mapping):
            return ParallelRunConfig.from_dict({**base, **given})
        raise ConfigError(
            "parallel_run_config",
            f"expected a ParallelRunConfig, a dict of fields or a step file path, got {type(base).__name__}",
        ) from None
