"""`parallel-steps run|plan pipeline.yml`: an Azure ML `type: pipeline` file, its jobs run here in order.

`--set` takes `inputs.<name>=VALUE`, `outputs.<name>=PATH`, `jobs.<job>.inputs.<name>=VALUE`,
`jobs.<job>.outputs.<name>=PATH`,
`datastores.<name>=FOLDER_OR_URL`, `jobs.<job>.<field>=VALUE` (a parallel job's configuration field)
and `<field>=VALUE` (every parallel job's); `--FIELD` options set every parallel job's field too.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import ConfigError, StepFailed
from .common import Progress, cancel_on_signals


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", metavar="NAME", help="with a pipeline file: run (or plan) only this job")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="with a pipeline file: start a new run of it instead of resuming its newest unfinished one (jobs "
        "that succeeded with the same inputs and code are still reused; --set allow_reuse=false runs them again)",
    )


def wants_pipeline(args: argparse.Namespace) -> bool:
    if not args.step_file:  # a step from options only: no import of the pipeline reader
        return False
    from ..azure.pipeline import is_pipeline_file

    return is_pipeline_file(args.step_file)


def run_pipeline_command(args: argparse.Namespace) -> int:
    from ..azure.pipeline_run import run_pipeline

    _refuse_step_options(args)
    progress = Progress()
    try:
        summary = run_pipeline(
            args.step_file,
            _options(args),
            run_dir=args.run_dir,
            job=args.job,
            fresh=args.fresh,
            cancel=cancel_on_signals(),
            on_progress=progress.progress,
        )
        code = 0
    except StepFailed as failed:
        summary, code = dict(failed.summary), 1
    finally:
        progress.close()
    if args.json:
        print(json.dumps(summary, default=str))
        return code
    print(f"{summary['status']}: {summary['status_reason']}")
    print(f"  run:  {summary['run_id']} ({summary['run_dir']})")
    for name, job in summary["jobs"].items():
        outputs = ", ".join(f"{key}={path}" for key, path in (job.get("outputs") or {}).items())
        print(f"  {name}: {job['status']} ({job['kind']}) {job.get('status_reason', '')}")
        if outputs:
            print(f"      outputs: {outputs}")
    if code:
        print(f"  resume:     parallel-steps run {args.step_file}  (the jobs that succeeded are kept)")
        print(f"  start over: parallel-steps run {args.step_file} --fresh")
    return code


def plan_pipeline_command(args: argparse.Namespace) -> int:
    from ..azure.pipeline import read_pipeline
    from ..azure.pipeline_run import PipelineRun, pipeline_problems
    from ..run import mini_batches

    options = _options(args)
    pipeline = read_pipeline(args.step_file, options.inputs)
    run = PipelineRun(pipeline, options, preview=True)
    problems = pipeline_problems(run, args.job)
    if problems:  # every one, each naming its file, job and field; nothing runs
        if args.json:
            print(json.dumps(dict(pipeline=pipeline.name, problems=[f"{where}: {what}" for where, what in problems])))
        for where, what in problems:
            print(f"{where}: {what}", file=sys.stderr)
        return 2
    run.assume_produced()
    jobs = []
    for node in pipeline.nodes.values():
        if args.job and node.name != args.job:
            continue
        job: dict[str, Any] = dict(name=node.name, kind=node.kind, after=list(node.upstream))
        if node.kind == "command":
            job["command"] = run.command(node)[1]
        else:
            try:
                config = run.parallel_config(node, make=False)
                batches = list(mini_batches(config))
                job["mini_batches"] = len(batches)
                job["items"] = sum(b.items or 0 for b in batches)
                job["bytes"] = sum(b.nbytes for b in batches)
            except Exception as exc:  # an input an upstream job has not produced yet: plan what can be planned
                job["waits"] = str(exc)
        jobs.append(job)
    if args.json:
        print(json.dumps(dict(pipeline=pipeline.name, jobs=jobs)))
        return 0
    print(f"pipeline {pipeline.name}: {len(jobs)} job(s), in this order")
    for job in jobs:
        after = f" after {', '.join(job['after'])}" if job["after"] else ""
        if job["kind"] == "command":
            print(f"  {job['name']} (command{after}): {job['command']}")
        elif "waits" in job:
            print(f"  {job['name']} (parallel{after}): planned when its inputs exist ({job['waits']})")
        else:
            print(f"  {job['name']} (parallel{after}): {job['mini_batches']} mini-batches, {job['bytes']} bytes")
    return 0


def _options(args: argparse.Namespace) -> Any:
    from ..azure.pipeline_run import PipelineOptions

    options = PipelineOptions()
    for key, value in vars(args).items():
        if key.startswith("field_") and value is not None:
            options.fields[key[6:]] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"{item!r} is not KEY=VALUE")
        parts = key.strip().split(".")
        if parts[0] == "inputs" and len(parts) == 2:
            options.inputs[parts[1]] = value
        elif parts[0] == "jobs" and len(parts) == 4 and parts[2] == "inputs":
            options.inputs[key.strip()] = value
        elif parts[0] == "datastores" and len(parts) == 2:
            options.datastores[parts[1]] = value
        elif (parts[0] == "outputs" and len(parts) == 2) or (
            parts[0] == "jobs" and len(parts) == 4 and parts[2] == "outputs"
        ):
            options.output_paths[key.strip()] = value
        elif parts[0] == "jobs" and len(parts) == 3:
            options.job_fields.setdefault(parts[1], {})[parts[2].replace("-", "_")] = value
        elif len(parts) == 1:
            options.fields[parts[0].replace("-", "_")] = value
        else:
            raise ConfigError(
                f"--set {key}",
                "is not a pipeline setting",
                "use inputs.NAME, outputs.NAME, jobs.JOB.inputs.NAME, jobs.JOB.outputs.NAME, jobs.JOB.FIELD, "
                "datastores.NAME or FIELD",
            )
    run_root = options.fields.pop("run_root", None)
    options.run_root = str(run_root) if run_root else None
    return options


def _refuse_step_options(args: argparse.Namespace) -> None:
    """Options of one step that a pipeline of several cannot take as they are."""
    if args.input:
        raise ConfigError("--input", "a pipeline's data are its inputs", "use --set inputs.NAME=PATH")
    if getattr(args, "field_output", None):
        raise ConfigError("--output", "a pipeline's outputs are its jobs'", "use --set jobs.JOB.outputs.NAME=PATH")
    if args.script_args:
        raise ConfigError("--", "a pipeline's jobs take their arguments from the file")
    if args.detach:
        raise ConfigError("--detach", "pipelines run in the foreground here", "run one in Airflow or Prefect")
