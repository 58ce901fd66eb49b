"""Worker hooks: what a layer above the core sets up inside every worker, around the entry script.

The core knows no such layer; one registers here (the Azure ML layer does, from the package's
`__init__`, which every worker process imports first) and the worker runtime calls each hook
before it imports the entry script and after the script's shutdown().
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..protocol import WorkerSpec


class WorkerHook(Protocol):
    """Set up and tear down something the entry script relies on, in one worker process."""

    def worker_started(self, spec: WorkerSpec) -> None:
        """Before the entry script is imported (its init() sees what this sets up)."""

    def worker_stopped(self) -> None:
        """After shutdown(); undo what `worker_started` left outside the process."""


_hooks: list[WorkerHook] = []


def register_worker_hook(hook: WorkerHook) -> None:
    """Run `hook` in every worker this process starts (once, however often it is registered)."""
    if hook not in _hooks:
        _hooks.append(hook)


def worker_hooks() -> tuple[WorkerHook, ...]:
    """The registered hooks, in registration order."""
    return tuple(_hooks)
