"""Worker hooks: what a layer above the core sets up inside every worker, around the entry script.

The core knows no such layer; one registers here by name (the Azure ML layer does, from the package's
`__init__`, which every process imports first) and the worker runtime calls each hook before it
imports the entry script and after the script's shutdown().
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..protocol import WorkerSpec


class WorkerHook(Protocol):
    """Set up and tear down something the entry script relies on, in one worker process."""

    def worker_started(self, spec: WorkerSpec) -> None:
        """Before the entry script is imported (its init() sees what this sets up)."""

    def worker_stopped(self) -> None:
        """After shutdown(); undo what `worker_started` left outside the process."""


_targets: list[str] = []  # `module:Class` of each hook, in registration order
_hooks: dict[str, WorkerHook] = {}  # the hooks made so far, by target


def register_worker_hook(target: str) -> None:
    """Run the hook `module:Class` (made without arguments) in every worker this process starts (once,
    however often it is registered). By name: only a worker imports the layer that provides it."""
    if target not in _targets:
        _targets.append(target)


def worker_hooks() -> tuple[WorkerHook, ...]:
    """The registered hooks, in registration order, imported and made on the first call."""
    for target in _targets:
        if target not in _hooks:
            module, _, name = target.partition(":")
            _hooks[target] = getattr(importlib.import_module(module), name)()
    return tuple(_hooks[target] for target in _targets)
