"""Shipping entry functions to the workers: `init` / `run` / `shutdown` callables, cloudpickled.

A worker is a fresh interpreter, so a function travels by reference (module and name) when
that interpreter can import its module from the same file, and by value (its code) when it
cannot: a DAG file, a flow file, a script run as `__main__`, a notebook. The step API, the
Prefect task and the Airflow decorator all ship through `dumps_callables`.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import cloudpickle

from ..errors import ConfigError

EntryFunction = Callable[..., Any]


def ship_functions(
    run: EntryFunction | None, init: EntryFunction | None = None, shutdown: EntryFunction | None = None
) -> bytes | None:
    """The payload `run_step(entry_callables=...)` takes for `run=` / `init=` / `shutdown=`; None when no
    function is given (the entry script runs).

    Raises:
        ConfigError: a given value is not callable, `init=` or `shutdown=` come without `run=`, or a
            function cannot be pickled (the message names it).
    """
    functions = {"init": init, "run": run, "shutdown": shutdown}
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise ConfigError(name, f"expected a function, got {type(function).__name__}")
    if run is None:
        if init is not None or shutdown is not None:
            raise ConfigError("run", "init= and shutdown= need run= (the functions replace entry_script)")
        return None
    return dumps_callables(functions)


def dumps_callables(functions: Mapping[str, EntryFunction | None], search_path: Iterable[str] | None = None) -> bytes:
    """Cloudpickle the entry functions, by value for every loaded module a worker could not import.

    Args:
        functions: `{"init": f, "run": g, "shutdown": h}` (None for a function not given).
        search_path: where a worker finds modules (default: `sys.path` of a new interpreter here).
    """
    path = tuple(search_path) if search_path is not None else _fresh_sys_path()
    registered = set(cloudpickle.list_registry_pickle_by_value())
    by_value = [
        module
        for module in list(sys.modules.values())
        if isinstance(module, types.ModuleType) and module.__name__ not in registered and not importable(module, path)
    ]
    shipped: dict[str, types.ModuleType] = {}
    for module in by_value:
        if module.__name__ in shipped:  # the same module under a second key of sys.modules
            continue
        try:
            cloudpickle.register_pickle_by_value(module)
            shipped[module.__name__] = module
        except ValueError:  # an alias whose __name__ is not in sys.modules
            pass
    try:
        pickled: bytes = cloudpickle.dumps(dict(functions))
        return pickled
    except Exception as exc:
        offender = next((name for name, f in functions.items() if f is not None and not _pickles(f)), "run")
        raise ConfigError(
            offender,
            f"cannot be shipped to the workers with cloudpickle ({type(exc).__name__}: {exc})",
            "avoid capturing open files, locks, clients or connections; create them in init=",
        ) from None
    finally:
        for module in shipped.values():  # the registry is process-wide: leave it as it was
            cloudpickle.unregister_pickle_by_value(module)


def importable(module: types.ModuleType, search_path: Iterable[str]) -> bool:
    """Whether an interpreter looking in `search_path` imports this module from the file it was loaded from."""
    name = getattr(module, "__name__", "")
    if name == "__main__" or not isinstance(name, str):
        return False
    if not getattr(module, "__file__", None):
        return True  # built-in or frozen
    top = name.partition(".")[0]
    found = _top_level_file(top, tuple(search_path))
    return found is not None and found == _top_level_origin(sys.modules.get(top))


def _pickles(function: EntryFunction) -> bool:
    try:
        cloudpickle.dumps(function)
        return True
    except Exception:
        return False


@functools.cache
def _top_level_file(top: str, search_path: tuple[str, ...]) -> str | None:
    """Where an interpreter finds a top-level module or package (None: it does not)."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, list(search_path))
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    location = spec.origin
    if location in (None, "namespace"):  # a namespace package: its first folder
        location = next(iter(spec.submodule_search_locations or []), None)
    return os.path.realpath(location) if location else None


def _top_level_origin(module: Any) -> str | None:
    """Where this process loaded a top-level module or package from."""
    if module is None:
        return None
    file: str | None = getattr(module, "__file__", None)
    if file:
        return os.path.realpath(file)
    paths = list(getattr(module, "__path__", []) or [])
    return os.path.realpath(paths[0]) if paths else None


@functools.cache
def _fresh_sys_path() -> tuple[str, ...]:
    """sys.path of a new interpreter with this environment; what a host adds at run time (Airflow's DAG
    folder, a flow file's folder, a test runner's root) is not on it."""
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return tuple(os.path.abspath(p or os.getcwd()) for p in json.loads(out.stdout))
