"""The step's secrets: `environment_variables` and `storage_options` values reach only the workers'
environment (and the driver's memory), and URLs' credentials are masked.

`environment_variables` and `storage_options` are where users put tokens, and a summary travels
far (XCom, Prefect artifacts, run.json, `--json`, the report). Everywhere but the workers, values
are masked, and so are the passwords and query strings of URLs (masking.py); a `${env:NAME}`
reference is shown as written and resolved, at the last moment, from the environment of the
process that runs the step.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..masking import MASK as MASK  # where the monitor and others take it from
from ..masking import mask_urls
from ..storage.options import StorageSettings

if TYPE_CHECKING:
    from .model import ParallelRunConfig

_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_SECRET_FIELDS = ("environment_variables", "storage_options")


def public_config(config: ParallelRunConfig) -> dict[str, Any]:
    """The effective configuration as plain JSON data for summaries, run.json, XCom and artifacts:
    environment variable and storage option values are masked (a `${env:NAME}` reference is shown as
    written), and so are URLs' passwords and query strings, wherever they appear."""
    data: dict[str, Any] = _masked_urls(json.loads(config.model_dump_json()))
    data["environment_variables"] = mask_environment(config.environment_variables)
    data["storage_options"] = {mask_urls(prefix): _masked(value) for prefix, value in config.storage_options.items()}
    return data


def secret_fields(config: ParallelRunConfig, resolve: bool = False) -> dict[str, Any]:
    """The fields that `public_config` masks, in clear, as JSON data: what a detached driver is handed in its
    environment to rebuild the step from its masked step.json (`resolve`: `${env:NAME}` read here, for a
    driver that runs where this environment is not)."""
    data = json.loads(config.model_dump_json())
    public = public_config(config)
    fields = {name: data[name] for name in data if data[name] != public[name] or name in _SECRET_FIELDS}
    if resolve:
        fields["environment_variables"] = resolved_environment(config)
        fields["storage_options"] = resolved_storage_options(config)
    return fields


def _masked(value: Any) -> Any:
    """A storage option as shown: strings masked but `${env:NAME}` references; numbers and flags as they are."""
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return mask(value) if isinstance(value, str) else value


def _masked_urls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _masked_urls(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked_urls(item) for item in value]
    return mask_urls(value) if isinstance(value, str) else value


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


def resolved_storage_options(config: ParallelRunConfig) -> dict[str, Any]:
    """`storage_options` with every `${env:NAME}` value read from this process's environment."""
    return {prefix: _resolved(options, prefix) for prefix, options in config.storage_options.items()}


def _resolved(value: Any, prefix: str) -> Any:
    if isinstance(value, dict):
        return {key: _resolved(item, prefix) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolved(item, prefix) for item in value]
    reference = _ENV_REF.fullmatch(value) if isinstance(value, str) else None
    if reference is None:
        return value
    if reference.group(1) not in os.environ:
        raise ConfigError(
            "storage_options",
            f"{mask_urls(prefix)}: {value} is not set in the environment of the process that runs the step",
        )
    return os.environ[reference.group(1)]


def storage_settings(config: ParallelRunConfig) -> StorageSettings:
    """How the run opens URLs: `storage_options` resolved, transient errors retried for up to
    `run_invocation_timeout`. An engine's credentials (an Airflow connection, a Prefect block) arrive as
    storage options too: its adapter puts them there (airflow/storage.py, prefect/storage.py)."""
    return StorageSettings(resolved_storage_options(config), retry_s=config.run_invocation_timeout)


def secret_values(config: ParallelRunConfig) -> list[str]:
    """Every secret value of the step, resolved (the resource monitor masks them in command lines)."""
    values = list(resolved_environment(config).values())
    stack: list[Any] = [resolved_storage_options(config)]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str):
            values.append(item)
    return values
