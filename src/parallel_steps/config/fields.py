"""The configuration's fields, in the order of the reference (docs/configuration.md's generated table,
the CLI's flags, the operator's docstring): one class per section, so each field is defined once, here,
with its type (config/types.py), default and description. `ParallelRunConfig` (config/model.py) joins them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .types import (
    MAX_CONCURRENCY_PER_WORKER,
    MAX_WORKERS_PER_GPU,
    TRIGGER,
    Arguments,
    AzureName,
    Datasets,
    EnvironmentVariables,
    FileName,
    LoggingLevel,
    NamedPaths,
    PartitionKeys,
    Partitions,
    Patterns,
    Size,
    SizeOrZero,
    StepName,
    StorageOptions,
)


class _Section(BaseModel):
    """A section is only ever a base of `ParallelRunConfig`: its own validator is never built (pydantic would
    build one per class as it is defined, a third of the configuration's import)."""

    model_config = ConfigDict(defer_build=True)


class StepFields(_Section):
    """The step and its data: what runs, on which inputs, with what, and where the output goes."""

    name: StepName = Field("parallel-run", description="Step name: 3-32 characters, lowercase letters, digits and '-'.")
    entry_script: str | None = Field(None, description="The user script with init() and run(mini_batch).")
    source_directory: str | None = Field(
        None, description="Folder put on sys.path in workers; entry_script is relative to it."
    )
    inputs: Datasets = Field(
        default_factory=list,
        description="Datasets to partition (one type): paths or fsspec URLs, FileDataset or TabularDataset.",
    )
    output: str | None = Field(
        None, description="Output folder, or an fsspec URL it is uploaded to; default <run_dir>/output."
    )
    side_inputs: NamedPaths = Field(
        default_factory=dict,
        description="name: path or fsspec URL of data for every worker; ${side_inputs.name} in arguments becomes its local path.",
    )
    models: NamedPaths = Field(
        default_factory=dict,
        description="name: path or fsspec URL of a model; in workers, azureml.core's Model.get_model_path(name) "
        "returns its local path (a single file's path, else the folder's). Copied to every node like side inputs.",
    )
    arguments: Arguments = Field(default_factory=list, description="Arguments passed to the entry script in sys.argv.")
    environment_variables: EnvironmentVariables = Field(
        default_factory=dict, description="Extra environment variables for every worker."
    )
    storage_options: StorageOptions = Field(
        default_factory=dict,
        description="URL prefix (s3://bucket/in, or a scheme alone: abfs://): the fsspec filesystem's options for "
        "the URLs it covers (the longest prefix wins), e.g. {key: ..., secret: ${env:AWS_SECRET}}; values are "
        "masked wherever environment_variables are.",
    )
    datastores: dict[str, str] = Field(
        default_factory=dict,
        description="Azure ML datastore name: the folder or fsspec URL that `azureml://datastores/<name>/paths/...` "
        "in inputs, side_inputs, models, output and arguments stands for (over PARALLEL_STEPS_DATASTORES, JSON, "
        "in the environment).",
    )


class PartitionFields(_Section):
    """How the inputs are cut into mini-batches."""

    mini_batch_size: Size = Field(
        None,
        description="Files per mini-batch (default 10), or bytes per mini-batch for tabular input (default 1MB; 1024, 512KB, 10MB, 1GB).",
        json_schema_extra=TRIGGER,
    )
    partition_keys: PartitionKeys = Field(
        None,
        description="One mini-batch per distinct combination of these keys: columns of tabular inputs (also hive "
        "folders such as Store=2/), or keys of the inputs' partition_format (files and tables).",
        json_schema_extra=TRIGGER,
    )
    partitions: Partitions = Field(
        None,
        description="Run over several partitions of the data at once (a backfill in one step): keys (folder names) "
        "that fill {partition} in every input path, globs matched against the folders there (2026-01-*, *), or a "
        "range {start, end, every: day|hour, format}. Mini-batches never cross a partition; each partition's "
        "output goes to <output>/<key>/, and the summary reports each partition (docs/partitions.md).",
    )


class OutcomeFields(_Section):
    """What a run tolerates before it fails, and what its output file holds."""

    error_threshold: int = Field(
        -1,
        ge=-1,
        description="Failed items tolerated before the job fails: items whose mini-batch failed, rows returned "
        "with an error and, as in ParallelRunStep, items run() returned no result for; -1 ignores all failures, and "
        "items without a result are then no failures (counted apart: items_without_result).",
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
    append_row_file_name: FileName = Field(
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
    append_row_dataframe_header: bool = Field(
        False,
        description="With text output: the file starts with one header line, the first returned DataFrame's column "
        "names (space-separated), as ParallelRunStep's --append_row_dataframe_header True (that argument in arguments "
        "sets it too). No effect on csv (always a header), parquet and jsonl.",
    )


class WorkerFields(_Section):
    """The workers: how many, their logging, their time limits, reuse."""

    node_count: int = Field(1, ge=1, description="Number of nodes.", json_schema_extra=TRIGGER)
    process_count_per_node: int | None = Field(
        None,
        ge=1,
        description="Worker processes per node; default the GPU count on a GPU machine, else the CPU count.",
        json_schema_extra=TRIGGER,
    )
    workers_per_gpu: int = Field(
        1,
        ge=1,
        le=MAX_WORKERS_PER_GPU,
        description="Workers that share each GPU (as Ray's num_gpus=1/N), for a model that leaves its GPU idle while "
        "one worker reads or waits. Each sees only its GPU (CUDA_VISIBLE_DEVICES); on a GPU machine the default "
        "process_count_per_node becomes GPUs x this.",
        json_schema_extra=TRIGGER,
    )
    max_concurrency_per_worker: int = Field(
        1,
        ge=1,
        le=MAX_CONCURRENCY_PER_WORKER,
        description="Mini-batches each worker has in flight at once, for an entry script whose run() is an `async def` "
        "(a model behind a server: its requests overlap on one event loop, after one init()). Each keeps its own "
        "run_invocation_timeout, retries and outcome; 1 runs one at a time.",
        json_schema_extra=TRIGGER,
    )
    threads_per_worker: int | None = Field(
        None,
        ge=1,
        description="Threads each worker's math libraries may use (OMP_NUM_THREADS, MKL_NUM_THREADS, "
        "OPENBLAS_NUM_THREADS and the like, set before the entry script is imported; torch and numpy read them). "
        "Default on the local backend: the node's CPUs shared among its workers, at least 1; on Ray, what Ray "
        "gives each actor. A variable set in environment_variables or in the caller's environment wins.",
        json_schema_extra=TRIGGER,
    )
    read_ahead: SizeOrZero = Field(
        "256MB",
        description="While run() works on one mini-batch, the worker reads the next one queued to it (a table slice, "
        "or the files named by URLs) when it is no larger than this (bytes or 64MB); 0 turns reading ahead off.",
        json_schema_extra=TRIGGER,
    )
    logging_level: LoggingLevel = Field(
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
    termination_grace: float = Field(
        20,
        gt=0,
        description="Seconds a canceled run (SIGTERM, Ctrl-C, Airflow's on_kill, a Prefect cancel, parallel-steps "
        "cancel) takes at most to stop, in any phase: mini-batches in flight may finish in the first half, "
        "shutdown() runs until three quarters, then the workers are killed; a second SIGTERM stops at once. "
        "Keep it under your scheduler's own (Kubernetes' terminationGracePeriodSeconds: 30).",
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


class FaultFields(_Section):
    """Fault tolerance and observability: retries, job-level failure rules, limits, logs."""

    fault_tolerant_policy: Literal["OnFailure", "ExitCodeAndErrorMsg", "Never"] = Field(
        "OnFailure",
        description="Which failed attempts are retried: any, only retryable errors, or none.",
        json_schema_extra=TRIGGER,
    )
    retryable_errors: Patterns = Field(
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
    worker_memory_limit: Size = Field(
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


class ExecutionFields(_Section):
    """Where the workers and the driver run."""

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


class AzureFields(_Section):
    """ParallelRunConfig's fields that are accepted here with no effect."""

    environment: AzureName = Field(
        None,
        description="ParallelRunConfig's Azure ML environment: accepted, no effect (workers run in the Python "
        "environment of the run); an Environment object or a mapping is kept as its name.",
    )
    compute_target: AzureName = Field(
        None,
        description="ParallelRunConfig's Azure ML compute target (a name, or a compute object, kept as its name): "
        "accepted, no effect; backend and node_count say where workers run.",
    )
    description: str | None = Field(
        None, description="ParallelRunConfig's description: accepted, kept in the run summary's config, no effect."
    )
