"""The entry script in the worker: imported from its file with its folders on `sys.path`, or its functions
unpickled; `sys.argv` set as ParallelRunStep sets it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..protocol import WorkerSpec


def import_entry(spec: WorkerSpec) -> dict[str, Callable[..., Any]]:
    """The entry script's init(), run() and shutdown() that it defines (run() it must), or the functions
    the Python API sent; `sys.argv` as the script expects it: its path (or `parallel_run`) and the arguments."""
    if spec.entry_callables is not None:
        functions = pickle.loads(spec.entry_callables)
        sys.argv = ["parallel_run", *list(spec.arguments)]
        return {k: v for k, v in functions.items() if v is not None}
    if spec.entry_script is None:
        raise ValueError("the worker was given neither an entry script nor its functions")
    script = Path(spec.entry_script)
    for folder in dict.fromkeys([spec.source_directory, str(script.parent)]):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    sys.argv = [str(script), *list(spec.arguments)]
    module = _import_script(script)
    if not callable(getattr(module, "run", None)):
        raise AttributeError(f"{script} defines no run(mini_batch) function")
    return {
        name: getattr(module, name) for name in ("init", "run", "shutdown") if callable(getattr(module, name, None))
    }


def _import_script(script: Path) -> ModuleType:
    """The entry script as a module named after it, whatever its file name ends with (`score`, `score.txt`:
    the checks compile any file as Python, so the worker imports any)."""
    loader = importlib.machinery.SourceFileLoader(script.stem, str(script))
    module_spec = importlib.util.spec_from_file_location(script.stem, script, loader=loader)
    if module_spec is None:  # not with a loader given (the type says it may be)
        raise ImportError(f"cannot import {script}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[script.stem] = module
    loader.exec_module(module)
    return module
