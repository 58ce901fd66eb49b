"""Airflow adapter: `@task.parallel_run`, whose decorated function is the step's `run(mini_batch)`.

The function (and `init=` / `shutdown=`) travel to the workers through `worker/shipping.py`: by
reference when a fresh interpreter can import their module, else by value (DAG files, the
DAG folder).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, _TaskDecorator, get_unique_task_id

from ..errors import ConfigError
from ..worker.shipping import ship_functions
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

    def entry_callables(self) -> bytes | None:
        return ship_functions(self.python_callable, self.init, self.shutdown)


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
