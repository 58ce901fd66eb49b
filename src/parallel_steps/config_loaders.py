"""Configurations from objects other than `ParallelRunConfig`: a layer above the core registers a loader
(the Azure ML layer: `azure-ai-ml` job objects), so `ParallelRunStep` reads them without the core importing
that layer. Registered by name (`module:function`) from the package's `__init__`, and imported only when an
object that is no configuration arrives: registering costs a worker nothing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import ParallelRunConfig

_loaders: list[str] = []


def register_config_loader(target: str) -> None:
    """Register `module:function`, which returns the configuration of an object it knows, None for others."""
    if target not in _loaders:
        _loaders.append(target)


def config_of(value: Any) -> ParallelRunConfig:
    """`value` as a configuration: itself, or what a registered loader makes of it.

    Raises:
        TypeError: no loader knows the object.
    """
    from .config import ParallelRunConfig

    if isinstance(value, ParallelRunConfig):
        return value
    for target in _loaders:
        module, _, function = target.partition(":")
        config: ParallelRunConfig | None = getattr(importlib.import_module(module), function)(value)
        if config is not None:
            return config
    raise TypeError(f"parallel_run_config: expected a ParallelRunConfig, got {type(value).__name__}")
