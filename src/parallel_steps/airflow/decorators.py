"""Airflow adapter: `@task.parallel_run`, whose decorated function is the step's `run(mini_batch)`.

The function (and `init=` / `shutdown=`) travel to the workers with cloudpickle: by reference
when a fresh interpreter can import their module, else by value (DAG files, the DAG folder).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import inspect
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import cloudpickle
from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, _TaskDecorator, get_unique_task_id

from ..errors import ConfigError
from .operators import FIELDS, ParallelRunOperator


class _ParallelRunDecoratedOperator(DecoratedOperator, ParallelRunOperator):
    """`ParallelRunOperator` whose entry script is the decorated function.

    Keywords given when the task is called (``score(inputs=folder)``) or mapped
    (``score.expand(inputs=folders)``) are config fields; they override the decorator's.
    """

    custom_operator_name = "@task.parallel_run"
    template_fields = ParallelRunOperator.template_fields
    template_fields_renderers = ParallelRunOperator.template_fields_renderers
    shallow_copy_attrs = ("python_callable", "init", "shutdown")

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        task_id: str,
        op_args: Any = None,
        op_kwargs: dict[str, Any] | None = None,
        init: Callable[[], Any] | None = None,
        shutdown: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # DecoratedOperator.__init__ would bind the call's keywords to run(mini_batch); here they
        # are config fields, so this sets its attributes and goes straight to ParallelRunOperator.
        if op_args:
            raise TypeError(
                f"@task.parallel_run task {task_id!r} takes config fields as keywords only, "
                "e.g. score(inputs=folder); the function itself receives the mini-batches"
            )
        op_kwargs = dict(op_kwargs or {})
        unknown = sorted(set(op_kwargs) - set(FIELDS))
        if unknown:
            raise ConfigError(
                unknown[0], f"is not a configuration field (task {task_id!r})", "valid: " + ", ".join(FIELDS)
            )
        for name, value in (("init", init), ("shutdown", shutdown)):
            if value is not None and not callable(value):
                raise TypeError(f"{name}: expected a callable, got {type(value).__name__}")
        if not getattr(self, "_BaseOperator__from_mapped", False):
            task_id = get_unique_task_id(task_id, kwargs.get("dag"), kwargs.get("task_group"))
        self.python_callable = python_callable
        self.op_args: list[Any] = []
        self.op_kwargs = op_kwargs
        self.init, self.shutdown = init, shutdown
        ParallelRunOperator.__init__(self, task_id=task_id, **{**kwargs, **op_kwargs})

    def entry_callables(self) -> bytes:
        return dumps_callables({"init": self.init, "run": self.python_callable, "shutdown": self.shutdown})


class _ParallelRunTaskDecorator(_TaskDecorator):
    """`_TaskDecorator` whose call, partial() and expand() keywords are config fields.

    Airflow checks those keywords against the decorated function's signature, but here the
    function is run(mini_batch) and the keywords configure the step.
    """

    @functools.cached_property
    def function_signature(self) -> inspect.Signature:
        return inspect.Signature([inspect.Parameter(f, inspect.Parameter.KEYWORD_ONLY, default=None) for f in FIELDS])


def parallel_run_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Turn `run(mini_batch)` into a parallel step task: ``@task.parallel_run(...)``.

    Args:
        python_callable: the `run(mini_batch)` function; it gets a list of file paths or a
            pandas DataFrame and returns one element (or row) per successful input.
        multiple_outputs: push each summary key as its own XCom (default False).
        **kwargs: `init=` / `shutdown=` callables run once per worker, config fields
            (as for `ParallelRunOperator`, templated) and `BaseOperator` arguments.

    Example:
        >>> @task.parallel_run(inputs="data/images", mini_batch_size=10, init=load_model)
        ... def score(mini_batch):
        ...     return [f"{path}: {predict(path)}" for path in mini_batch]
        >>> score()                        # or score(inputs=folder), score.expand(inputs=folders)
    """

    def decorate(function: Callable[..., Any]) -> TaskDecorator:
        if not callable(function):
            raise TypeError("@task.parallel_run takes keyword arguments only; it decorates run(mini_batch)")
        return _ParallelRunTaskDecorator(
            function=function,
            multiple_outputs=bool(multiple_outputs),
            operator_class=_ParallelRunDecoratedOperator,
            kwargs=dict(kwargs),
            decorator_name="task.parallel_run",
        )

    return decorate(python_callable) if python_callable is not None else decorate


# Shipping callables ---------------------------------------------------------------------------


def dumps_callables(functions: dict[str, Callable[..., Any] | None]) -> bytes:
    """Cloudpickle the entry functions, by value for modules a worker could not import."""
    for module in list(sys.modules.values()):
        if isinstance(module, types.ModuleType) and not _importable(module):
            with contextlib.suppress(ValueError):  # an alias whose __name__ is not in sys.modules
                cloudpickle.register_pickle_by_value(module)
    try:
        pickled: bytes = cloudpickle.dumps(functions)
        return pickled
    except Exception as exc:
        offender = next((name for name, f in functions.items() if f is not None and not _pickles(f)), "run")
        raise ConfigError(
            offender,
            f"cannot be shipped to the workers with cloudpickle ({type(exc).__name__}: {exc})",
            "avoid capturing open files, locks, clients or connections; create them in init=",
        ) from None


def _pickles(function: Callable[..., Any]) -> bool:
    try:
        cloudpickle.dumps(function)
        return True
    except Exception:
        return False


def _importable(module: Any) -> bool:
    """Whether a fresh interpreter (as a worker starts) imports this module from the same file."""
    name = getattr(module, "__name__", "")
    if name == "__main__" or not isinstance(name, str):
        return False
    file = getattr(module, "__file__", None)
    if not file:
        return True  # built-in or frozen
    top = name.partition(".")[0]
    found = _top_level_file(top)
    return found is not None and found == _top_level_origin(sys.modules.get(top))


@functools.cache
def _top_level_file(top: str) -> str | None:
    """Where a fresh interpreter finds a top-level module or package (None: it does not)."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, list(_fresh_sys_path()))
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
    """sys.path of a new interpreter with this environment; Airflow's additions (DAG folder) are not on it."""
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return tuple(os.path.abspath(p or os.getcwd()) for p in json.loads(out.stdout))
