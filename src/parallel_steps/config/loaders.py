"""Where configurations may come from besides step files and `ParallelRunConfig` itself: a layer above the
core registers its readers (the Azure ML layer: v2 job files, `azure-ai-ml` job objects), so `from_yaml`,
`load_job` and `ParallelRunStep` read them without the core importing that layer. Readers are registered by
name (`module:function`) from the package's `__init__` and imported only when such a file or object
arrives, so registering costs a worker nothing. A leaf: it holds the names; the readers' callers ask it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

_CONFIG_LOADERS: list[str] = []  # object -> ParallelRunConfig, or None for objects it does not know
_JOB_READERS: list[str] = []  # (a job file's mapping, its path) -> configuration fields


def register_config_loader(target: str) -> None:
    """Register `module:function`, which returns the configuration of an object it knows, None for others."""
    if target not in _CONFIG_LOADERS:
        _CONFIG_LOADERS.append(target)


def register_job_reader(target: str) -> None:
    """Register `module:function(data, path) -> fields`, the reader of job files (files with a `type:` key)."""
    if target not in _JOB_READERS:
        _JOB_READERS.append(target)


def config_loaders() -> Iterator[Callable[[Any], Any]]:
    """The registered object loaders, imported in the order they were registered."""
    for target in _CONFIG_LOADERS:
        yield _imported(target)


def job_reader() -> Callable[..., dict[str, Any]] | None:
    """The registered job-file reader (the last registered), or None."""
    return _imported(_JOB_READERS[-1]) if _JOB_READERS else None


def _imported(target: str) -> Any:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
