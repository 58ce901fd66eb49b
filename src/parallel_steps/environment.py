"""The step's environment variables: their values reach only the workers' environment.

`environment_variables` is where users put tokens, and a summary travels far (XCom, Prefect
artifacts, run.json, `--json`, the report). Everywhere but the workers, values are masked; a
`${env:NAME}` reference is shown as written and resolved, at the last moment, from the
environment of the process that runs the step.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import ParallelRunConfig

_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
MASK = "***"


def public_config(config: ParallelRunConfig) -> dict[str, Any]:
    """The effective configuration as plain JSON data for summaries, run.json, XCom and artifacts:
    environment variable values are masked (a `${env:NAME}` reference is shown as written)."""
    data: dict[str, Any] = json.loads(config.model_dump_json())
    data["environment_variables"] = mask_environment(config.environment_variables)
    return data


def mask_environment(variables: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as shown anywhere but in the workers' environment: names, masked values."""
    return {name: mask(value) for name, value in variables.items()}


def mask(value: str) -> str:
    """A secret's value as shown anywhere outside the worker's environment."""
    return value if _ENV_REF.fullmatch(value) else MASK


def resolved_environment(config: ParallelRunConfig) -> dict[str, str]:
    """The workers' extra environment: `environment_variables` with `${env:NAME}` read from this
    process's environment. Only the workers' environment ever holds the values."""
    resolved = {}
    for name, value in config.environment_variables.items():
        reference = _ENV_REF.fullmatch(value)
        if reference:
            source = reference.group(1)
            if source not in os.environ:
                raise ConfigError(
                    "environment_variables",
                    f"{name}: ${{env:{source}}} is not set in the environment of the process that runs the step",
                )
            value = os.environ[source]
        resolved[name] = value
    return resolved
