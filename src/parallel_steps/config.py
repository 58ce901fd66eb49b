"""Configuration: one validated `ParallelRunConfig` with the ParallelRunStep field names and defaults.

Every value is checked when the config is built (at DAG or flow definition time),
and errors are one line per field. `with_overrides` is the single entry for values
that arrive as strings: Airflow params, Prefect parameters, `--set` on the CLI.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.config import JsonDict

from .errors import ConfigError
from .inputs.datasets import Dataset, FileDataset, TabularDataset, ensure_dataset
from .inputs.partitions import PartitionFormat
from .stepfile import read_yaml, resolve_paths
from .store.runs import default_run_root

NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
#: Accepted as ParallelRunConfig takes them, with no effect here (the run logs one INFO line naming them).
IGNORED_FIELDS = ("environment", "compute_target", "description")
_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}  # Python's logging takes both names
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
_SIZE_HINT = "use 1024, 512KB, 10MB, 1GB"
#: The mark of a field that a DAG param, trigger conf or `--set` may change by default: it changes neither the
#: code that runs, its environment, nor where data is read or written (issue 14; see overrides.py).
TRIGGER: JsonDict = {"trigger_overridable": True}
_INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def check_input_name(field: str, name: Any) -> None:
    """Names of side inputs (and models) appear in `${side_inputs.NAME}` and in paths on every node: one
    safe path component, like an identifier (letters, digits, `_`, `.`, `-`; no `..`)."""
    if not isinstance(name, str) or not _INPUT_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(field, f"{name!r} is not a valid name", "use letters, digits, _ . - and start with a letter")


def parse_size(value: int | str) -> int:
    """Bytes from an int or a `KB`/`MB`/`GB` string (1024-based, like ParallelRunStep)."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError
    unit = (match.group(2) or "").upper().replace("IB", "B")
    return int(float(match.group(1)) * _UNITS[unit])


def is_size_with_unit(value: Any) -> bool:
    return isinstance(value, str) and not value.strip().isdigit()


class ParallelRunConfig(BaseModel):
    """The configuration of one parallel step; field names and defaults follow ParallelRunStep.

    Example:
        >>> config = ParallelRunConfig(entry_script="score.py", inputs=["data/images"],
        ...                            output="out", mini_batch_size=10)
        >>> config.with_overrides(mini_batch_size="5").mini_batch_size
        5
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # The step and its data.
    name: str = Field("parallel-run", description="Step name: 3-32 characters, lowercase letters, digits and '-'.")
    entry_script: str | None = Field(None, description="The user script with init() and run(mini_batch).")
    source_directory: str | None = Field(
        None, description="Folder put on sys.path in workers; entry_script is relative to it."
    )
    inputs: list[Dataset] = Field(
        default_factory=list,
        description="Datasets to partition (one type): paths or fsspec URLs, FileDataset or TabularDataset.",
    )
    output: str | None = Field(
        None, description="Output folder, or an fsspec URL it is uploaded to; default <run_dir>/output."
    )
    side_inputs: dict[str, str] = Field(
        default_factory=dict,
        description="name: path or fsspec URL of data for every worker; ${side_inputs.name} in arguments becomes its local path.",
    )
    models: dict[str, str] = Field(
        default_factory=dict,
        description="name: path or fsspec URL of a model; in workers, azureml.core's Model.get_model_path(name) "
        "returns its local path (a single file's path, else the folder's). Copied to every node like side inputs.",
    )
    arguments: list[str] = Field(default_factory=list, description="Arguments passed to the entry script in sys.argv.")
    environment_variables: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for every worker."
    )

    # Partitioning.
    mini_batch_size: int | str | None = Field(
        None,
        description="Files per mini-batch (default 10), or bytes per mini-batch for tabular input (default 1MB; 1024, 512KB, 10MB, 1GB).",
        json_schema_extra=TRIGGER,
    )
    partition_keys: list[str] | None = Field(
        None,
        description="One mini-batch per distinct combination of these keys: columns of tabular inputs (also hive "
        "folders such as Store=2/), or keys of the inputs' partition_format (files and tables).",
        json_schema_extra=TRIGGER,
    )

    # Outcome and thresholds.
    error_threshold: int = Field(
        -1,
        ge=-1,
        description="Failed items tolerated before the job fails; -1 ignores all failed items.",
        json_schema_extra=TRIGGER,
    )
    mini_batch_error_threshold: int = Field(
        -1,
        ge=-1,
        description="Failed mini-batches tolerated before the job fails; -1 ignores them.",
        json_schema_extra=TRIGGER,
    )
    allowed_failed_count: int | None = Field(
        None,
        ge=-1,
        description="ParallelRunConfig's name for mini_batch_error_threshold: failed mini-batches tolerated before the job "
        "fails; -1 ignores them. When both are set, the job fails once either is exceeded.",
        json_schema_extra=TRIGGER,
    )
    allowed_failed_percent: float = Field(
        100, ge=0, le=100, description="Percent of mini-batches allowed to fail (0-100).", json_schema_extra=TRIGGER
    )
    output_action: Literal["append_row", "summary_only"] = Field(
        "append_row", description="append_row: gather every returned row in one file; summary_only: only count results."
    )
    append_row_file_name: str = Field(
        "parallel_run_step.txt",
        description="Name of the append_row output file in the output folder; any file name (the name does not "
        "change the content, append_row_format does).",
    )
    append_row_format: Literal["text", "csv", "parquet", "jsonl"] | None = Field(
        None,
        description="Content of the append_row file. text: ParallelRunStep's, one str(element) line per returned "
        "element, DataFrame rows as space-separated values without header or index; csv (with a header), parquet "
        "or jsonl. Default: parquet when append_row_file_name ends in .parquet, else text.",
    )

    # Workers.
    node_count: int = Field(1, ge=1, description="Number of nodes.", json_schema_extra=TRIGGER)
    process_count_per_node: int | None = Field(
        None,
        ge=1,
        description="Worker processes per node; default the GPU count on a GPU machine, else the CPU count.",
        json_schema_extra=TRIGGER,
    )
    logging_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "INFO",
        description="Level of the root logger in workers: DEBUG, INFO, WARNING (or WARN), ERROR, CRITICAL.",
        json_schema_extra=TRIGGER,
    )
    run_invocation_timeout: float = Field(
        60,
        gt=0,
        description="Seconds one run() call may take before the worker is killed and the attempt fails.",
        json_schema_extra=TRIGGER,
    )
    run_max_try: int = Field(
        3, ge=1, description="Attempts per mini-batch, the first included.", json_schema_extra=TRIGGER
    )
    shutdown_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds each worker's shutdown() may take before the worker is killed (the run's status "
        "stands; the summary lists the workers cut off); default run_invocation_timeout.",
        json_schema_extra=TRIGGER,
    )
    allow_reuse: bool = Field(
        True,
        description="Reuse results of an earlier run with the same inputs, script and settings.",
        json_schema_extra=TRIGGER,
    )
    reuse_fingerprint: Literal["stat", "content"] = Field(
        "stat",
        description="How inputs are fingerprinted for reuse: path, size and modification time, or content hash.",
        json_schema_extra=TRIGGER,
    )

    # Fault tolerance and observability.
    fault_tolerant_policy: Literal["OnFailure", "ExitCodeAndErrorMsg", "Never"] = Field(
        "OnFailure",
        description="Which failed attempts are retried: any, only retryable errors, or none.",
        json_schema_extra=TRIGGER,
    )
    retryable_errors: list[str] = Field(
        default_factory=list, description="Substrings or regexes of retryable errors (ExitCodeAndErrorMsg)."
    )
    retryable_exit_codes: list[int] = Field(
        default_factory=list,
        description="Worker exit codes that are retryable (ExitCodeAndErrorMsg).",
        json_schema_extra=TRIGGER,
    )
    max_same_error: int = Field(
        -1,
        ge=-1,
        description="Stop the job once the same error has failed this many mini-batches; -1 off.",
        json_schema_extra=TRIGGER,
    )
    max_tolerated_failure_rate: float = Field(
        -1,
        ge=-1,
        le=1,
        description="Fail the job once this fraction of finished mini-batches failed (0-1); -1 off.",
        json_schema_extra=TRIGGER,
    )
    max_job_restarts: int = Field(
        0, ge=0, description="Restarts of the step after a system error of the driver.", json_schema_extra=TRIGGER
    )
    hang_detection: bool = Field(
        True,
        description="Fail the job when no mini-batch completes within progress_update_timeout.",
        json_schema_extra=TRIGGER,
    )
    progress_update_timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds without a completed mini-batch before the job fails; default 3 x (run_invocation_timeout + 30).",
        json_schema_extra=TRIGGER,
    )
    first_task_creation_timeout: float = Field(
        600,
        gt=0,
        description="Seconds allowed until the first mini-batch is handed to a worker, and at most waited for another run of the same step on the same inputs to end.",
        json_schema_extra=TRIGGER,
    )
    worker_memory_limit: int | str | None = Field(
        None,
        description="A worker above this memory (bytes or 4GB) is stopped and the attempt fails as OutOfMemory.",
        json_schema_extra=TRIGGER,
    )
    resource_monitor_interval: float = Field(
        600,
        ge=0,
        description="Seconds between resource usage samples in logs/perf; 0 turns it off.",
        json_schema_extra=TRIGGER,
    )
    profiling_module: Literal["cProfile"] | None = Field(
        None, description="cProfile writes logs/sys/node/<node>/processNNN.profile per worker."
    )
    report: bool = Field(
        True,
        description="Write logs/report.html at the end of the run: timeline per worker, throughput, errors, resources.",
        json_schema_extra=TRIGGER,
    )
    upload_report: bool = Field(
        True,
        description="When output is a URL, upload the report beside the output file (<output>/report.html) once the "
        "run succeeded, so it outlives the machine that ran the step.",
        json_schema_extra=TRIGGER,
    )

    # Execution.
    backend: Literal["local", "ray"] = Field(
        "local", description="local: worker processes on this machine; ray: Ray actors across a cluster."
    )
    ray_address: str | None = Field(
        None, description="Ray cluster address (default RAY_ADDRESS, else a local Ray started for the run)."
    )
    run_root: str | None = Field(
        None, description="Folder of run directories; default PARALLEL_STEPS_HOME or ./.parallel_steps."
    )
    submit_to: Literal["local", "ray_job"] = Field(
        "local",
        description="Where the driver runs: local: in the calling process; ray_job: on the Ray cluster as a Ray job "
        "(needs backend ray; the run root on storage the cluster and the caller share).",
    )
    ray_job_python: str | None = Field(
        None,
        description="With submit_to: ray_job, the Python on the cluster that runs the driver, e.g. /opt/ray/bin/python "
        "(it needs parallel-steps' dependencies); default the Python of the cluster's Ray, found on the node the job "
        "starts on.",
    )

    # Accepted as ParallelRunConfig takes them; no effect here.
    environment: str | None = Field(
        None,
        description="ParallelRunConfig's Azure ML environment: accepted, no effect (workers run in the Python "
        "environment of the run); an Environment object or a mapping is kept as its name.",
    )
    compute_target: str | None = Field(
        None,
        description="ParallelRunConfig's Azure ML compute target (a name, or a compute object, kept as its name): "
        "accepted, no effect; backend and node_count say where workers run.",
    )
    description: str | None = Field(
        None, description="ParallelRunConfig's description: accepted, kept in the run summary's config, no effect."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not 3 <= len(value) <= 32 or not re.match(NAME_PATTERN, value):
            raise ValueError(f"{value!r} is not a valid step name (3-32 characters matching {NAME_PATTERN})")
        return value

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs(cls, value: Any) -> list[Dataset]:
        items = value if isinstance(value, (list, tuple)) else [value]
        return [_dataset(item, f"inputs[{index}]") for index, item in enumerate(items)]

    @field_validator("side_inputs", "models", mode="before")
    @classmethod
    def _named_data(cls, value: Any, info: ValidationInfo) -> dict[str, str]:
        """A mapping of name -> path (a list of paths is named after the files); names are checked."""
        if isinstance(value, (list, tuple)):
            if not all(isinstance(p, (str, os.PathLike)) for p in value):
                raise ValueError(f"{value!r} is not a list of paths (or use NAME: PATH)")
            value = {Path(os.fspath(p)).name: os.fspath(p) for p in value}
        for name in value or {}:
            check_input_name(info.field_name or "side_inputs", name)
        return value or {}

    @field_validator("environment", "compute_target", mode="before")
    @classmethod
    def _azure_object(cls, value: Any) -> Any:
        """An Azure ML object (Environment, ComputeTarget) or mapping is kept as its name only: the summary is
        published, and an environment's definition may hold registry credentials."""
        if value is None or isinstance(value, str):
            return value
        name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
        return str(name or type(value).__name__)

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments(cls, value: Any) -> list[str]:
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else value

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _environment(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        value = {str(k): str(v) for k, v in value.items()}
        for name, text in value.items():  # what the OS refuses to start a worker with
            if not name or "=" in name or "\0" in name + text:
                raise ValueError(f"{name!r} is not a valid variable (names are not empty, hold no '='; no NUL)")
        return value

    @field_validator("partition_keys", mode="before")
    @classmethod
    def _partition_keys(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else (value or None)

    @field_validator("logging_level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return _LEVEL_ALIASES.get(value.strip().upper(), value.strip().upper())

    @field_validator("mini_batch_size", "worker_memory_limit", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None or value == "":
            return None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        try:
            size = parse_size(value)
        except (ValueError, TypeError):
            raise ValueError(f"{value!r} is not a size ({_SIZE_HINT})") from None
        if size < 1:
            raise ValueError(f"{value!r} must be at least 1")
        return value.strip() if isinstance(value, str) else value

    @field_validator("append_row_file_name")
    @classmethod
    def _output_file(cls, value: str) -> str:
        """Any file name, as in ParallelRunStep, but only a name: the file stays in the output folder."""
        if not value.strip() or value in (".", "..") or any(c in value for c in "/\\\0"):
            raise ValueError(f"{value!r} must be a file name, without a folder (e.g. results.txt)")
        return value

    @field_validator("retryable_errors")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regex ({exc})") from None
        return value

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
    def shutdown_seconds(self) -> float:
        return self.shutdown_timeout or self.run_invocation_timeout

    @property
    def progress_timeout(self) -> float:
        return self.progress_update_timeout or 3 * (self.run_invocation_timeout + 30)

    def resolved_run_root(self) -> Path:
        return default_run_root(self.run_root)

    # Construction from strings, files and overrides ------------------------

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParallelRunConfig:
        """A config from loose values (strings from templates, forms and flags are coerced)."""
        unknown = sorted(map(str, set(data) - set(cls.model_fields)))  # YAML keys may be numbers or null
        if unknown:
            raise ConfigError(unknown[0], "is not a configuration field", "valid: " + ", ".join(cls.model_fields))
        return cls(**{key: _coerce(cls, key, value) for key, value in data.items()})

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
        data = read_yaml(path, "step file")
        if "type" in data:  # no configuration field is called `type`: a job file
            from .azure.job import job_fields

            return cls.from_dict({**job_fields(data, Path(path)), **overrides})
        return cls.from_dict({**resolve_paths(data, Path(path).absolute().parent), **overrides})


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


def _dataset(item: Any, where: str) -> Dataset:
    """A dataset; an error inside it names the input and its field (`inputs[0].partition_format: ...`)."""
    try:
        return ensure_dataset(item)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in (where, *error["loc"]))
        if error["type"] == "extra_forbidden":
            model = FileDataset if exc.title == "FileDataset" else TabularDataset
            valid = ", ".join(name for name in model.model_fields if name != "type")
            raise ConfigError(
                field, f"is not a field of a {model.model_fields['type'].default} input", f"valid: {valid}"
            ) from None
        raise ConfigError(field, error["msg"].removeprefix("Value error, ")) from None


def _coerce(cls: type[BaseModel], key: str, value: Any) -> Any:
    """Parse a string aimed at a list, dict or optional field (JSON or YAML flow syntax)."""
    if not isinstance(value, str):
        return value
    annotation = str(cls.model_fields[key].annotation)
    if any(t in annotation for t in ("list", "dict")) and key != "inputs":
        import yaml

        text = value.strip()
        if not text:
            return None if "None" in annotation else ([] if "list" in annotation else {})
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = text
        if "list" in annotation and not isinstance(parsed, list):
            parsed = [s.strip() for s in text.split(",")] if key != "arguments" else text.split()
        return parsed
    if key == "inputs":
        return [s.strip() for s in value.split(",")] if "," in value else value
    if value.strip().lower() in ("", "none", "null") and "None" in annotation:
        return None
    return value


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
            message = "is not a configuration field (valid: " + ", ".join(ParallelRunConfig.model_fields) + ")"
        elif error["type"] == "literal_error":
            message = f"{error['input']!r} is not one of {message.removeprefix('Input should be ')}"
        elif error["type"] not in ("value_error", "assertion_error"):
            message = f"{error['input']!r} is not valid ({message[0].lower() + message[1:]})"
        problems.append((field, message))
    first = ConfigError(*problems[0])
    if len(problems) > 1:
        first.args = ("; ".join(f"{f}: {m}" for f, m in problems),)
    return first
