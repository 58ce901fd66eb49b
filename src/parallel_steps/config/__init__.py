"""The configuration: `ParallelRunConfig`, its fields and types, step and job files, layers, trust, secrets.

A face whose names load on first use: every worker imports `loaders.py` (through the package's
registrations) and must not pay for pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "NAME_PATTERN": ".model",
    "ParallelRunConfig": ".model",
    "config_of": ".model",
    "load_job": ".model",
    "check_fields": ".model",
    "coerce": ".model",
    "unknown_field": ".model",
    "StepSpec": ".layers",
    "layered_config": ".layers",
    "ALL": ".trust",
    "Allowed": ".trust",
    "allowed_fields": ".trust",
    "OVERRIDABLE": ".trust",
    "trigger_overrides": ".trust",
}
__all__ = [
    "ALL",
    "NAME_PATTERN",
    "OVERRIDABLE",
    "Allowed",
    "ParallelRunConfig",
    "StepSpec",
    "allowed_fields",
    "check_fields",
    "coerce",
    "config_of",
    "layered_config",
    "load_job",
    "trigger_overrides",
    "unknown_field",
]

if TYPE_CHECKING:
    from .layers import StepSpec, layered_config
    from .model import NAME_PATTERN, ParallelRunConfig, check_fields, coerce, config_of, load_job, unknown_field
    from .trust import ALL, OVERRIDABLE, Allowed, allowed_fields, trigger_overrides


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
