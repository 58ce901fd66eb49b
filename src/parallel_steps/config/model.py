"""Configuration: one validated `ParallelRunConfig` with the ParallelRunStep field names and defaults.

Every value is checked when the config is built (at DAG or flow definition time),
and errors are one line per field. `with_overrides` is the single entry for values
that arrive as strings: Airflow params, Prefect parameters, `--set` on the CLI.

The fields are defined by section in config/fields.py (their value types and checks in
config/types.py); this module joins them, checks them together, builds configs from loose
values and files, and projects the typed sections each layer takes (config/sections.py).
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, ValidationError, model_validator

from ..errors import ConfigError
from ..inputs.datasets import Dataset, FileDataset, TabularDataset
from ..inputs.partitions import PartitionFormat
from ..inputs.step_partitions import PLACEHOLDER, expand, resolve
from ..storage.datastores import resolve_step_paths
from .fields import AzureFields, ExecutionFields, FaultFields, OutcomeFields, PartitionFields, StepFields, WorkerFields
from .files import file_fields, job_file_fields
from .loaders import config_loaders
from .sections import OUTCOME_FIELDS, DriverPolicy, PlanSettings, PoolConfig, Thresholds
from .types import NAME_PATTERN, default_run_root, is_size_with_unit, parse_size

__all__ = ["NAME_PATTERN", "ParallelRunConfig", "check_fields", "config_of", "load_job", "unknown_field"]

#: Accepted as ParallelRunConfig takes them, with no effect here (the run logs one INFO line naming them).
IGNORED_FIELDS = ("environment", "compute_target", "description")


# pydantic lists the fields of the last base first: the sections are named here from the last to the first,
# so that model_fields (and the reference generated from it) reads StepFields, PartitionFields, ... AzureFields.
class ParallelRunConfig(
    AzureFields, ExecutionFields, FaultFields, WorkerFields, OutcomeFields, PartitionFields, StepFields
):
    """The configuration of one parallel step; field names and defaults follow ParallelRunStep.

    Example:
        >>> config = ParallelRunConfig(entry_script="score.py", inputs=["data/images"],
        ...                            output="out", mini_batch_size=10)
        >>> config.with_overrides(mini_batch_size="5").mini_batch_size
        5
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=False)

    @model_validator(mode="before")
    @classmethod
    def _dataframe_header_argument(cls, data: Any) -> Any:
        """ParallelRunStep's `--append_row_dataframe_header True` in arguments (v1 `arguments`, v2
        `program_arguments`) sets the field; it stays in sys.argv, as on Azure."""
        arguments = data.get("arguments") if isinstance(data, dict) else None
        if not isinstance(arguments, (list, tuple)) or "append_row_dataframe_header" in data:
            return data
        flags = [str(a) for a in arguments]
        for index, flag in enumerate(flags):
            name, equals, value = flag.partition("=")
            if name == "--append_row_dataframe_header":
                if not equals:
                    following = flags[index + 1] if index + 1 < len(flags) else "--"
                    value = "True" if following.startswith("--") else following
                return {**data, "append_row_dataframe_header": value}
        return data

    @model_validator(mode="before")
    @classmethod
    def _datastore_paths(cls, data: Any) -> Any:
        """`azureml://datastores/...` paths (v2 job files, v1 configs) become the folders or URLs mapped."""
        return resolve_step_paths(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _consistent(self) -> ParallelRunConfig:
        kinds = {type(d) for d in self.inputs}
        if len(kinds) > 1:
            raise ConfigError("inputs", "mixes files and tabular datasets", "use one type per step")
        if FileDataset in kinds and is_size_with_unit(self.mini_batch_size):
            raise ConfigError(
                "mini_batch_size",
                f"{self.mini_batch_size!r} is a size but the inputs are files",
                "use a file count, e.g. 10",
            )
        if self.partition_keys and FileDataset in kinds:
            _check_file_keys(self.partition_keys, self.inputs)
        _check_partitioned(self.partitions is not None, self.inputs, self.output)
        if self.submit_to == "ray_job" and self.backend != "ray":
            raise ConfigError(
                "submit_to", "'ray_job' runs the driver on a Ray cluster, so it needs backend: ray", "set backend=ray"
            )
        if self.backend == "ray" and self.retryable_exit_codes:
            raise ConfigError(
                "retryable_exit_codes",
                "Ray does not report the exit code of a lost worker, so exit codes cannot be retried on backend ray",
                "use retryable_errors (the loss message), or backend local",
            )
        return self

    # Derived values -------------------------------------------------------

    @property
    def is_tabular(self) -> bool:
        return any(isinstance(d, TabularDataset) for d in self.inputs)

    @property
    def batch_size(self) -> int:
        """Files per mini-batch, or bytes per mini-batch for tabular inputs."""
        if self.mini_batch_size is None:
            return parse_size("1MB") if self.is_tabular else 10
        return parse_size(self.mini_batch_size)

    @property
    def output_format(self) -> str:
        """The content of the append_row file: `append_row_format`, else parquet for a `.parquet` name, else text."""
        if self.append_row_format:
            return self.append_row_format
        return "parquet" if self.append_row_file_name.lower().endswith(".parquet") else "text"

    @property
    def ignored_fields(self) -> list[str]:
        """The fields set that have no effect here (ParallelRunConfig's environment, compute_target, description)."""
        return [name for name in IGNORED_FIELDS if getattr(self, name) is not None]

    @property
    def memory_limit_bytes(self) -> int | None:
        return None if self.worker_memory_limit is None else parse_size(self.worker_memory_limit)

    @property
    def read_ahead_bytes(self) -> int:
        return 0 if self.read_ahead is None else parse_size(self.read_ahead)

    @property
    def reads_ahead(self) -> bool:
        """Whether workers read the next mini-batch while one runs: tables, and files named by URLs (local files
        have nothing to read: run() gets their paths)."""
        if not self.read_ahead_bytes:
            return False
        return self.is_tabular or any("://" in path for dataset in self.inputs for path in dataset.path)

    @property
    def shutdown_seconds(self) -> float:
        return self.shutdown_timeout or self.run_invocation_timeout

    @property
    def progress_timeout(self) -> float:
        return self.progress_update_timeout or 3 * (self.run_invocation_timeout + 30)

    def resolved_run_root(self) -> Path:
        return default_run_root(self.run_root)

    # The sections each layer takes -----------------------------------------

    def plan_settings(self) -> PlanSettings:
        """What the planner reads: the inputs and how they are cut into mini-batches; with `partitions`, each
        partition's inputs, key after key (a glob among the keys lists the folder the partitions are in)."""
        if self.partitions is None:
            return PlanSettings(self.inputs, self.batch_size, self.partition_keys, self.reuse_fingerprint)
        keys = resolve(self.partitions, self.inputs)  # globs list the folder where the partitions are
        datasets = expand(self.inputs, keys)
        return PlanSettings(datasets, self.batch_size, self.partition_keys, self.reuse_fingerprint, keys)

    def thresholds(self) -> Thresholds:
        """The fields that decide Succeeded or Failed for the same results."""
        return Thresholds(**{name: getattr(self, name) for name in OUTCOME_FIELDS})

    def driver_policy(self) -> DriverPolicy:
        """What the driver decides by: thresholds, retries and timeouts."""
        return DriverPolicy(
            thresholds=self.thresholds(),
            fault_tolerant_policy=self.fault_tolerant_policy,
            run_max_try=self.run_max_try,
            retryable_errors=tuple(self.retryable_errors),
            retryable_exit_codes=tuple(self.retryable_exit_codes),
            run_invocation_timeout=self.run_invocation_timeout,
            first_task_creation_timeout=self.first_task_creation_timeout,
            hang_detection=self.hang_detection,
            progress_timeout=self.progress_timeout,
            termination_grace=self.termination_grace,
            read_ahead=self.reads_ahead,
            max_concurrency=self.max_concurrency_per_worker,
        )

    def pool_config(self) -> PoolConfig:
        """What choosing and sizing a worker pool reads."""
        return PoolConfig(
            backend=self.backend,
            ray_address=self.ray_address,
            node_count=self.node_count,
            process_count_per_node=self.process_count_per_node,
            memory_limit=self.memory_limit_bytes,
            shutdown_timeout=self.shutdown_seconds,
            node_wait_s=self.first_task_creation_timeout,
        )

    # Construction from strings, files and overrides ------------------------

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParallelRunConfig:
        """A config from loose values (strings from templates, forms and flags are coerced)."""
        check_fields(data)
        return cls(**{key: coerce(key, value) for key, value in data.items()})

    def with_overrides(self, **params: Any) -> ParallelRunConfig:
        """A new validated config with `params` replacing fields; strings such as "5", "true",
        "1MB" or '["a", "b"]' are coerced, so values from templates and forms work."""
        if not params:
            return self
        base = self.model_dump(exclude_unset=True)
        base["inputs"] = self.inputs
        return type(self).from_dict({**base, **params})

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], **overrides: Any) -> ParallelRunConfig:
        """A config from a step file, or from an Azure ML v2 `type: parallel` job file (see `load_job`);
        relative paths are relative to the file's folder."""
        return cls.from_dict({**file_fields(path), **overrides})


def load_job(path: str | os.PathLike[str] | Any, **overrides: Any) -> ParallelRunConfig:
    """The configuration of an Azure ML v2 `type: parallel` job file, or of an `azure-ai-ml` object (what
    `parallel_run_function(...)` builds, called with its inputs, or a `@pipeline` job of one parallel job),
    run with `run_step` or `ParallelRunStep(parallel_run_config=...)`; `overrides` replace fields as in
    `with_overrides`.

    Example:
        >>> config = load_job("jobs/iris.yml", process_count_per_node=2)
    """
    if not isinstance(path, (str, os.PathLike)):  # read by a registered loader (azure/sdk_objects.py)
        return config_of(path).with_overrides(**overrides)
    return ParallelRunConfig.from_dict({**job_file_fields(path), **overrides})


def config_of(value: Any) -> ParallelRunConfig:
    """`value` as a configuration: itself, or what a registered loader (config/loaders.py) makes of it.

    Raises:
        TypeError: no loader knows the object.
    """
    if isinstance(value, ParallelRunConfig):
        return value
    for loader in config_loaders():
        config = loader(value)
        if isinstance(config, ParallelRunConfig):
            return config
    raise TypeError(f"parallel_run_config: expected a ParallelRunConfig, got {type(value).__name__}")


def unknown_field(name: str, where: str = "") -> ConfigError:
    """The error for a name that is no configuration field; `where` says whose (e.g. a task's)."""
    problem = "is not a configuration field" + (f" ({where})" if where else "")
    return ConfigError(name, problem, "valid: " + ", ".join(ParallelRunConfig.model_fields))


def check_fields(names: Iterable[Any], where: str = "") -> None:
    """Refuse the first (in sorted order) of `names` that is no configuration field; YAML keys may be
    numbers or null, so names are compared as text."""
    unknown = sorted(map(str, set(names) - set(ParallelRunConfig.model_fields)))
    if unknown:
        raise unknown_field(unknown[0], where)


def _check_file_keys(keys: list[str], inputs: list[Dataset]) -> None:
    """File inputs are partitioned by keys of their `partition_format`, as in Azure ML."""
    for index, dataset in enumerate(inputs):
        if not dataset.partition_format:
            raise ConfigError(
                "partition_keys",
                f"file input {index} has no partition_format to take {', '.join(keys)} from",
                "e.g. {type: files, path: data, partition_format: /{user}/{genre}/*.wav}",
            )
        have = PartitionFormat(dataset.partition_format).keys
        missing = [key for key in keys if key not in have]
        if missing:
            raise ConfigError(
                "partition_keys",
                f"{missing[0]!r} is not a key of partition_format {dataset.partition_format!r}",
                f"have: {', '.join(have)}",
            )


def _check_partitioned(partitioned: bool, inputs: list[Dataset], output: str | None) -> None:
    """With `partitions`, every input path names `{partition}` once; without, none does. The output is one
    folder: each partition's goes to a folder of its own in it."""
    for index, dataset in enumerate(inputs):
        for path in dataset.path:
            count = path.count(PLACEHOLDER)
            if partitioned and count != 1:
                raise ConfigError(
                    f"inputs[{index}]",
                    f"{path} names {PLACEHOLDER} {count} times; with partitions every input path names it once",
                    f"e.g. /data/events/{PLACEHOLDER}/",
                )
            if count and not partitioned:
                raise ConfigError(
                    "partitions",
                    f"inputs[{index}] {path} names {PLACEHOLDER}, but no partitions are given",
                    "set partitions: a list of keys, globs such as 2026-01-*, or {start, end, every}",
                )
    if output and PLACEHOLDER in output:
        raise ConfigError(
            "output",
            f"{output} names {PLACEHOLDER}",
            "give the folder: each partition's output goes to <output>/<key>/",
        )


# Values that arrive as strings ------------------------------------------------------------------


def _shape(annotation: Any) -> tuple[type | None, bool]:
    """What a field's type takes apart from scalars: a list or a dict (or neither), and whether None."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    containers = [typing.get_origin(member) or member for member in members]
    return next((c for c in containers if c in (list, dict)), None), type(None) in members


def coerce(key: str, value: Any) -> Any:
    """A string aimed at a list, dict or optional field parsed by the field's type (lists and mappings in
    JSON or YAML flow syntax, a list also as comma-separated text); other values are left to pydantic."""
    if not isinstance(value, str):
        return value
    if key == "inputs":  # paths, so never YAML: a path may look like a mapping or a number
        return [s.strip() for s in value.split(",")] if "," in value else value
    container, optional = _shape(ParallelRunConfig.model_fields[key].annotation)
    text = value.strip()
    if container is None:
        return None if optional and text.lower() in ("", "none", "null") else value
    if not text:
        return None if optional else container()
    import yaml  # here, not at the top: most configs get no strings for list or dict fields

    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = text
    if container is list and not isinstance(parsed, (list, dict)):  # a mapping is the field's other shape
        parsed = text.split() if key == "arguments" else [s.strip() for s in text.split(",")]
    return parsed


def _config_error(exc: ValidationError) -> ConfigError:
    """One line naming each bad field, from pydantic's errors."""
    problems = []
    for error in exc.errors():
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, ConfigError):
            return cause
        field = next((str(p) for p in error["loc"] if isinstance(p, str)), "config")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            problems.append(unknown_field(field))
            continue
        if error["type"] == "literal_error":
            message = f"{error['input']!r} is not one of {message.removeprefix('Input should be ')}"
        elif error["type"] not in ("value_error", "assertion_error"):
            message = f"{error['input']!r} is not valid ({message[0].lower() + message[1:]})"
        problems.append(ConfigError(field, message))
    first = problems[0]
    if len(problems) > 1:
        first.args = ("; ".join(map(str, problems)),)
    return first
