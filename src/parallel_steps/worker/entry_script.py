"""`EntryScript`: what an entry script learns about its worker, as in ParallelRunStep.

Workers also register it as `azureml_user.parallel_run.EntryScript`, so scripts
written for ParallelRunStep run unchanged. The project ships no `azureml_user`
package; the module exists only inside workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypedDict


class WorkerContext(TypedDict, total=False):
    """What a worker tells its entry script (empty outside a worker: the properties' defaults apply)."""

    log_dir: str
    entry_script_log: str
    output_dir: str
    working_dir: str
    agent_name: str
    node_id: str
    side_inputs: dict[str, str]
    logging_level: str


_context: WorkerContext = {}
_hang_timeout_hook: Callable[[float | None], None] | None = None


class EntryScript:
    """The worker's view for the entry script; every instance shares one state.

    Attributes:
        logger: writes to `logs/user/entry_script_log/<node_id>/processNNN.log.txt`.
        log_dir: that folder, for files of the script's own.
        output_dir: the step's output folder, for files the script writes itself.
        agent_name: this worker's process name, `processNNN`.
        node_id: this worker's node.
        side_inputs: side-input name -> local path.
    """

    @property
    def logger(self) -> logging.Logger:
        return logging.getLogger("entry_script")

    @property
    def log_dir(self) -> str:
        return _context.get("log_dir", os.getcwd())

    @property
    def output_dir(self) -> str:
        return _context.get("output_dir", os.getcwd())

    @property
    def working_dir(self) -> str:
        return _context.get("working_dir", os.getcwd())

    @property
    def agent_name(self) -> str:
        return _context.get("agent_name", "process000")

    @property
    def node_id(self) -> str:
        return _context.get("node_id", "node0")

    @property
    def side_inputs(self) -> dict[str, str]:
        return dict(_context.get("side_inputs", {}))

    def get_side_input(self, name: str) -> str:
        """The local path of side input `name`."""
        try:
            return _context["side_inputs"][name]
        except KeyError:
            raise KeyError(f"no side input named {name!r} (have: {', '.join(self.side_inputs) or 'none'})") from None

    @contextlib.contextmanager
    def hang_timeout(self, seconds: float | None) -> Iterator[None]:
        """Let the current run() take up to `seconds` (None: no limit) inside this block, e.g. for
        a slow first mini-batch; the step's run_invocation_timeout applies again after it."""
        if _hang_timeout_hook:
            _hang_timeout_hook(seconds)
        try:
            yield
        finally:
            if _hang_timeout_hook:
                _hang_timeout_hook(-1)


def configure(context: WorkerContext, hang_timeout_hook: Callable[[float | None], None] | None = None) -> None:
    """Set the worker's context, the entry script logger, and the `azureml_user` alias."""
    global _hang_timeout_hook
    _context.update(context)
    _hang_timeout_hook = hang_timeout_hook
    Path(context["log_dir"]).mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("entry_script")
    logger.setLevel(context.get("logging_level", "INFO"))
    logger.propagate = False
    handler = logging.FileHandler(context["entry_script_log"], encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    package = types.ModuleType("azureml_user")
    package.__path__ = []
    module = types.ModuleType("azureml_user.parallel_run")
    vars(module)["EntryScript"] = EntryScript
    vars(package)["parallel_run"] = module
    sys.modules.setdefault("azureml_user", package)
    sys.modules.setdefault("azureml_user.parallel_run", module)
