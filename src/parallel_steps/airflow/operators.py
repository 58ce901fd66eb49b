"""Airflow adapter: `ParallelRunOperator` maps templated fields, DAG params and the task's identity onto
a config (`config/layers.py`), launches the run (`jobs/launch.py`: the driver in the task, or a Ray job the
task follows itself or, deferrable, through `ParallelRunTrigger` in the triggerer), writes what it
reports to the task log (`task_log.py`) and maps the outcome back to Airflow, once.

It holds no executor logic: scheduling, retries, resume and the file layout belong to the core.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.definitions._internal.mixins import ResolveMixin
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.log import mask_secret

from ..config import ALL, NAME_PATTERN, Allowed, ParallelRunConfig, allowed_fields, layered_config, trigger_overrides
from ..config.secrets import public_config, resolved_environment
from ..control import Cancel
from ..errors import ConfigError, InputError, StepFailed, WriteRefused
from ..host import require_linux
from ..jobs import Follower, Launcher, finished, run_status
from ..report import key_figures
from . import assets
from .hooks import RayClusterHook
from .links import RunReportLink
from .partitions import add_partitions_check, check_partition_key, names_partition_key, unless_partly_failed
from .storage import is_storage_path, with_connections
from .task_log import TaskLog
from .triggers import ParallelRunTrigger

FIELDS: tuple[str, ...] = tuple(ParallelRunConfig.model_fields)
# `BaseOperator.output` is the task's XComArg, so the `output` field lives in another attribute.
_ATTRIBUTES = {"output": "output_folder"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


def attribute(field: str) -> str:
    """The operator attribute (and template field) that holds a config field."""
    return _ATTRIBUTES.get(field, field)


def _with_field_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """Expose every config field as a keyword in `__init__`'s signature.

    Airflow reads the signature to fill `default_args` and to check `partial()` / `expand()`
    keywords, so the fields must be named there, not hidden in `**kwargs`.
    """
    signature = inspect.signature(init)
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    params += [inspect.Parameter(f, keyword, default=None) for f in FIELDS]
    params += [p for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]
    init.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return init


class ParallelRunOperator(assets.StepLineage, BaseOperator):
    """Run a parallel step (Azure ML ParallelRunStep) as one Airflow task.

    Every `ParallelRunConfig` field is a keyword argument and a template field (listed
    below). Static values are validated when the DAG file is parsed; templated ones when the
    task runs, where strings such as "5", "true" or "1MB" are coerced. A DAG param or trigger
    conf key named like a field (``airflow dags test DAG -c '{"mini_batch_size": 5}'``)
    overrides that field at run time, if the field is open to trigger-time input (see
    `params_override`); one that is not fails the task. The step runs in
    ``<run_root>/airflow/<dag_id>/<task_id>/<run_id>/<map_index>``, so a task retry resumes it
    and mapped or parallel tasks never share a run directory.

    With ``submit_to="ray_job"`` the driver runs on the Ray cluster as a Ray job; a retry or a
    cleared task finds the run's job still running and follows it instead of starting another.

    Args:
        parallel_run_config: a `ParallelRunConfig` to start from; field keywords override it.
        params_override: which config fields DAG params and trigger conf may override: True
            (the default: the fields that change neither code, environment nor paths, see
            `parallel_steps.config.OVERRIDABLE`), a collection of field names (exactly those),
            "all" (every field; logged as a warning: whoever may trigger the DAG then chooses
            the code that runs), or False (none: use templates such as "{{ params.x }}"). A
            param whose value is None overrides nothing.
        ray_conn_id: a ``ray_cluster`` connection naming the Ray cluster (address, token, TLS), instead of
            ``ray_address`` and a token in the environment; the token is never rendered nor logged.
        deferrable: with ``submit_to="ray_job"``, hand the waiting to the triggerer
            (`ParallelRunTrigger`) so no worker slot is held while the job runs (default: the
            ``[operators] default_deferrable`` option). A local driver runs in the worker anyway.
        **kwargs: config fields (below) and `BaseOperator` arguments. ``outlets`` defaults to the output as
            an Asset (the output folder or URL, else the task's folder under the run root; ``[]``: none),
            ``inlets`` to the inputs; the outlet's event extra holds the run's facts (see docs/airflow.md).

    Returns:
        The run summary (XCom ``return_value``): status, counts, run_dir, output_file, config.

    Raises:
        ConfigError: at parse time, for an invalid static value (the message names the field).
        AirflowFailException: at run time, for an invalid templated value (not retried).
        AirflowException: the step failed or was canceled; the message gives the reason and
            the path of ``logs/job_result.txt``. A retry resumes the step.

    Example:
        >>> score = ParallelRunOperator(
        ...     task_id="score_digits", entry_script="score.py", source_directory="examples/digits",
        ...     inputs="examples/digits/data/images", mini_batch_size="{{ params.mini_batch_size }}")
    """

    template_fields = tuple(attribute(f) for f in FIELDS)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        attribute(f): "py" for f in ("inputs", "side_inputs", "arguments", "environment_variables")
    }
    ui_color = "#d6eaf8"
    operator_extra_links = (RunReportLink(),)
    # Seconds between progress lines in the task log (the first and the last are always written).
    progress_log_interval: float = 10.0

    @_with_field_keywords
    def __init__(
        self,
        *,
        parallel_run_config: ParallelRunConfig | None = None,
        params_override: Allowed = True,
        ray_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        fields = {f: kwargs.pop(f, None) for f in FIELDS}
        outlets, inlets = kwargs.get("outlets"), kwargs.get("inlets")
        super().__init__(**kwargs)
        if parallel_run_config is not None and not isinstance(parallel_run_config, ParallelRunConfig):
            raise TypeError(
                f"parallel_run_config: expected a ParallelRunConfig, got {type(parallel_run_config).__name__}"
            )
        self.parallel_run_config = parallel_run_config
        allowed_fields(params_override)  # unknown field names fail at parse time
        self.params_override = params_override
        self.deferrable = deferrable
        self.ray_conn_id = ray_conn_id
        for field, value in fields.items():
            setattr(self, attribute(field), value)
        self._cancel: Cancel | None = None
        self._follower: Follower | None = None  # the run, when its driver is a Ray job this task follows
        # Before rendering: which fields' templates name the DAG run's partition (the run must have one).
        self.partition_key_fields = [field for field, value in fields.items() if names_partition_key(value)]
        assets.declare(self, self._check_static(), outlets, inlets)
        if fields["partitions"] is not None and self.has_dag():  # one task over many partitions
            add_partitions_check(self, self.task_id.rsplit(".", 1)[-1])

    # Configuration ----------------------------------------------------------------------------

    def field_values(self) -> dict[str, Any]:
        """The config fields set on this task (None means not set)."""
        values = {f: getattr(self, attribute(f)) for f in FIELDS}
        return {f: v for f, v in values.items() if v is not None}

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """`BaseOperator.partial`, with the static config values checked now (at parse time), as
        `__init__` checks them; the mapped values of `expand()` are checked when each task runs."""
        static = {f: v for f in FIELDS if (v := kwargs.get(f)) is not None and not _deferred(v)}
        config = layered_config(kwargs.get("parallel_run_config"), static, name=_name_from(kwargs.get("task_id", "")))
        if kwargs.get("outlets") is None and "output" in static:  # expand() may map any other field
            kwargs["outlets"] = assets.default_outlets(config, None, "")
        return super().partial(**kwargs)

    def _check_static(self) -> ParallelRunConfig:
        """Validate what is known at parse time; templates and XComArgs are checked in execute()."""
        static = {f: v for f, v in self.field_values().items() if not _deferred(v)}
        if self.is_templated("partitions"):  # known when it runs; the inputs' {partition} is checked now
            static["partitions"] = ["partition"]
        return layered_config(self.parallel_run_config, static, name=_name_from(self.task_id))

    def is_templated(self, field: str) -> bool:
        """Whether a config field set on this task is known only when it runs (a template, an XComArg)."""
        return _deferred(getattr(self, attribute(field)))

    def rendered_config(self) -> ParallelRunConfig:
        """The task's fields (rendered once the task runs) on its base config, without DAG params."""
        return layered_config(self.parallel_run_config, self.field_values(), name=_name_from(self.task_id))

    def build_config(self, context: Mapping[str, Any]) -> ParallelRunConfig:
        """The effective config: base config, then the (rendered) fields, then DAG params."""
        base, fields, name = self.parallel_run_config, with_connections(self.field_values()), _name_from(self.task_id)
        config = layered_config(base, fields, name=name)
        overridden = layered_config(base, fields, self._param_overrides(context), name=name)
        before, after = public_config(config), public_config(overridden)  # secrets masked
        changed = {f: after[f] for f in FIELDS if after[f] != before[f]}
        if changed:
            self.log.info("DAG params / trigger conf override: %s", ", ".join(f"{k}={v!r}" for k, v in changed.items()))
        return overridden

    def _param_overrides(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """DAG params named like config fields, within what `params_override` opens. Airflow has already
        merged the trigger conf into params (core.dag_run_conf_overrides_params), so both are checked."""
        if self.params_override == ALL:
            self.log.warning(
                "params_override='all': whoever may trigger this DAG may choose the code, "
                "environment and paths of task %s",
                self.task_id,
            )
        how_to_allow = f"a DAG author allows it with params_override=[..., '{{field}}'] on task {self.task_id!r}"
        return trigger_overrides(context.get("params") or {}, self.params_override, how_to_allow)

    # Running ----------------------------------------------------------------------------------

    def execute(self, context: Mapping[str, Any]) -> dict[str, Any]:
        self._cancel = Cancel()
        check_partition_key(self.partition_key_fields, context)
        with self._airflow_errors(context):
            require_linux()
            config = self.build_config(context)
            if self.ray_conn_id:
                config = RayClusterHook(self.ray_conn_id).use(config)
            for name, value in resolved_environment(config).items():
                mask_secret(value, name)  # values from Variables/Connections stay masked in the task log too
            run_dir, run_id = run_location(config, context)
            self.log.info("parallel step %s: run directory %s", config.name, run_dir)
            launcher = Launcher(config, run_dir=run_dir, run_id=run_id, entry_callables=self.entry_callables())
            if self.deferrable and not launcher.elsewhere:
                self.log.info("deferrable: the driver runs in this task (submit_to: local), so the task does not defer")
            hooks = _OperatorHooks(self, config.name)
            summary = unless_partly_failed(lambda: launcher.run(hooks, self._cancel), self.log, self.task_id)
        return self._succeeded(summary, context)

    def execute_complete(self, context: Mapping[str, Any], event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after `ParallelRunTrigger` fired: the run's summary (XCom), or the task fails with its reason.

        Without an event (the deferred task was run again before its trigger fired, e.g. after the
        process running the trigger was killed), the task starts over: it attaches to the run's job.
        """
        if event is None:
            return self.execute(context)
        with self._airflow_errors(context):
            if self.ray_conn_id:
                RayClusterHook(self.ray_conn_id).grant()  # the run's status may ask the cluster
            summary = unless_partly_failed(lambda: finished(run_status(event["run_dir"])), self.log, self.task_id)
        return self._succeeded(summary, context)

    @contextlib.contextmanager
    def _airflow_errors(self, context: Mapping[str, Any]) -> Iterator[None]:
        """The step's outcomes as Airflow's: an invalid value is not retried, an input problem and a
        failed run are (a retry resumes the run)."""
        try:
            yield
        except ConfigError as exc:
            raise AirflowFailException(f"invalid configuration: {exc}") from None
        except InputError as exc:
            raise AirflowException(f"input problem: {exc}") from None
        except StepFailed as exc:
            raise AirflowException(self._failure(exc.summary, context)) from None
        except WriteRefused as exc:  # before the run had a summary; a retry resumes it
            raise AirflowException(f"parallel step: {exc}") from None

    def _succeeded(self, summary: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
        """The task's result (XCom `return_value`) once the step succeeded, whichever way it ran (or, over
        partitions, once some succeeded: airflow/partitions.py)."""
        self._log_result(summary)
        self._record(summary, context)
        return dict(summary)

    def entry_callables(self) -> bytes | None:
        """Cloudpickled init/run/shutdown replacing `entry_script`; None runs the script."""
        return None

    def on_kill(self) -> None:
        """Stop the step: the driver sees the flag (or, in a Ray job, the cancel request and the job's
        stop) within a second and stops every worker."""
        reason = f"task {self.task_id} was killed (on_kill)"
        if self._follower is not None:
            self._follower.cancel(reason)  # now: the task process may end before its wait loop looks again
        elif self._cancel is not None:
            self._cancel.cancel(reason)

    def _log_result(self, summary: Mapping[str, Any]) -> None:
        how = "reused an earlier run" if summary.get("reused") else summary["status_reason"]
        self.log.info(
            "%s: %s; %d/%d mini-batches succeeded (%d reused), %d items succeeded, %d failed",
            summary["status"],
            how,
            summary["mini_batches_succeeded"],
            summary["mini_batches_total"],
            summary["mini_batches_reused"],
            summary["items_succeeded"],
            summary["items_failed"],
        )
        self.log.info("output: %s", summary.get("output_file") or summary.get("output"))
        self._log_report(summary)

    def _log_report(self, summary: Mapping[str, Any]) -> None:
        """The task log's last line: the key figures and the run's report page."""
        self.log.info("%s; report: %s", key_figures(summary), summary.get("report") or "not written")

    def _failure(self, summary: Mapping[str, Any], context: Mapping[str, Any]) -> str:
        """Log the job result and keep the summary in XCom (and for the lineage facets); return the exception's message."""
        self._summary = dict(summary)
        job_result = summary.get("job_result") or str(Path(summary["run_dir"]) / "logs" / "job_result.txt")
        try:
            self.log.error("job result (%s):\n%s", job_result, Path(job_result).read_text())
        except OSError:
            pass
        self._log_report(summary)
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "xcom_push"):
            ti.xcom_push(key="parallel_run_summary", value=summary)
        return (
            f"parallel step {summary.get('name')} {summary.get('status')}: {summary.get('status_reason')} "
            f"(details: {job_result}; run directory {summary['run_dir']}; a retry resumes the run)"
        )


if ParallelRunOperator.__doc__:  # None under python -OO
    ParallelRunOperator.__doc__ += "\n    Config fields (all templated):\n" + "".join(
        f"        {name}: {info.description}\n" for name, info in ParallelRunConfig.model_fields.items()
    )


# Helpers --------------------------------------------------------------------------------------


def run_location(config: ParallelRunConfig, context: Mapping[str, Any]) -> tuple[Path, str]:
    """The task's run directory and run id, keyed by DAG, task, run and map index.

    The same task instance (a retry, or a clear) gets the same directory, so the step
    resumes; the map index (-1 when unmapped) keeps mapped instances apart.
    """
    ti = context["ti"]
    parts = [_safe(str(p)) for p in (ti.dag_id, ti.task_id, ti.run_id, ti.map_index)]
    return config.resolved_run_root().joinpath("airflow", *parts), "airflow." + ".".join(parts)


def _safe(part: str) -> str:
    return _UNSAFE.sub("_", part).strip(".") or "_"


def _name_from(task_id: str) -> str | None:
    """The step name when none is given: a valid name from the task id (score_digits -> score-digits)."""
    name = re.sub(r"[^a-z0-9-]+", "-", task_id.rsplit(".", 1)[-1].lower()).strip("-")[:32].rstrip("-")
    return name if len(name) >= 3 and re.match(NAME_PATTERN, name) else None


def _deferred(value: Any) -> bool:
    """True for values Airflow resolves when the task runs: Jinja strings, XComArgs and ObjectStoragePaths (their
    connections), also nested."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, ResolveMixin) or is_storage_path(value):
        return True
    if isinstance(value, Mapping):
        return any(_deferred(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_deferred(v) for v in value)
    return False


class _OperatorHooks(TaskLog):
    """The task log, and what the task does once the driver runs as a Ray job: remember it (for
    `on_kill`) and, deferrable, hand the waiting to the triggerer."""

    def __init__(self, operator: ParallelRunOperator, step: str):
        super().__init__(operator.log, operator.progress_log_interval)
        self.operator, self.step = operator, step

    def launched(self, follower: Follower, where: str) -> None:
        operator = self.operator
        operator._follower = follower
        operator.log.info("parallel step %s: %s", self.step, where)
        if operator.deferrable:
            trigger = ParallelRunTrigger(
                follower.run, progress_log_interval=operator.progress_log_interval, ray_conn_id=operator.ray_conn_id
            )
            operator.defer(trigger=trigger, method_name="execute_complete")
