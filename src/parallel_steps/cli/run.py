"""`parallel-steps run` and `parallel-steps plan`: a step from a file and options, run or only planned."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, StepFailed
from .common import Progress, add_step_options, cancel_on_signals, config_from_args, print_summary
from .pipeline import add_pipeline_options, plan_pipeline_command, run_pipeline_command, wants_pipeline

if TYPE_CHECKING:
    from ..config import ParallelRunConfig


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(
        "run",
        help="run a step",
        description="Run a step: STEP.yaml and/or options. Arguments after -- go to the entry script.",
    )
    add_step_options(run, every_field=True)
    run.add_argument("--run-dir", help="run directory (a rerun in the same directory resumes it)")
    run.add_argument("--detach", action="store_true", help="run in the background; print the run id and directory")
    run.add_argument("--json", action="store_true", help="print the run summary as one JSON object on stdout")
    add_pipeline_options(run)
    run.set_defaults(command=_run)

    plan = commands.add_parser("plan", help="show how the inputs split into mini-batches")
    add_step_options(plan, every_field=True)
    plan.add_argument("--show", type=int, default=5, metavar="N", help="mini-batches to list (default 5)")
    plan.add_argument(
        "--diff",
        action="store_true",
        help="compare with the earlier runs of this step: mini-batches that would be reused, kept, new or dropped, "
        "and why (new, changed or deleted files)",
    )
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    add_pipeline_options(plan)
    plan.set_defaults(command=_plan)


def _run(args: argparse.Namespace) -> int:
    from ..jobs import Launcher, run_status

    if wants_pipeline(args):  # an Azure ML pipeline file: its jobs in order (cli/pipeline.py)
        return run_pipeline_command(args)
    config = config_from_args(args, args.script_args)
    launcher = Launcher(config, run_dir=args.run_dir)
    if args.detach:
        run_dir = launcher.start()
        status = run_status(str(run_dir))
        print(json.dumps(status) if args.json else f"{status['run_id']} {run_dir}")
        return 0
    cancel = cancel_on_signals(config.termination_grace)  # Ctrl-C or SIGTERM cancels the run, wherever its driver runs
    progress = Progress()
    try:
        summary = launcher.run(progress, cancel)
        code = 0
    except StepFailed as failed:
        summary, code = failed.summary, 1
    finally:
        progress.close()
    print_summary(summary, args.json)
    return code


def _plan(args: argparse.Namespace) -> int:
    if wants_pipeline(args):
        return plan_pipeline_command(args)
    config = config_from_args(args, None)
    if args.diff:
        return _diff(config, args.json)
    if not config.inputs:
        raise ConfigError("inputs", "no inputs given", "use --input PATH, or inputs: in the step file")
    from ..run import mini_batches

    items: list[int | None] = []
    sizes: list[int] = []
    first: list[dict[str, Any]] = []
    notes: list[str] = []
    for mini_batch in mini_batches(config, notes):
        items.append(mini_batch.items)
        sizes.append(mini_batch.nbytes)
        if len(first) < args.show:
            source = mini_batch.describe()
            first.append(dict(id=mini_batch.index, items=mini_batch.items, bytes=mini_batch.nbytes, source=source))
    known = [n for n in items if n is not None]
    counted = len(known) == len(items)
    unit = "rows" if config.is_tabular else "files"
    per, spread = _spread(known) if counted else None, _spread(sizes)
    appended = config.output_action == "append_row"
    if args.json:
        plan = dict(
            mini_batches=len(items),
            items=sum(known) if counted else None,
            bytes=sum(sizes),
            unit=unit,
            batch_size=config.batch_size,
            items_per_batch=per,
            bytes_per_batch=spread,
            first=first,
            notes=notes,
            append_row_file_name=config.append_row_file_name if appended else None,
            append_row_format=config.output_format if appended else None,
        )
        print(json.dumps(plan))
        return 0
    print(f"{len(items)} mini-batches, {sum(known) if counted else 'unknown'} {unit}, {sum(sizes)} bytes")
    if per:
        print(f"{unit} per mini-batch: min {per['min']}, median {per['median']}, max {per['max']}")
    if spread:
        print(f"bytes per mini-batch: min {spread['min']}, median {spread['median']}, max {spread['max']}")
    for batch in first:
        print(
            f"  #{batch['id']}: {batch['items'] if batch['items'] is not None else '?'} {unit}, "
            f"{batch['bytes']} bytes  {batch['source']}"
        )
    if appended:
        print(f"output: {config.append_row_file_name} ({config.output_format})")
    for note in notes:
        print(f"note: {note}")
    return 0


def _spread(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    return dict(min=min(values), median=statistics.median(values), max=max(values))


def _diff(config: ParallelRunConfig, as_json: bool) -> int:
    from ..run import preview

    diff = preview(config)
    if as_json:
        print(json.dumps(diff))
        return 0
    earlier = f"against run {diff['earlier_run']}" if diff["earlier_run"] else "no earlier run of this step"
    print(f"{diff['mini_batches']} mini-batches ({earlier}): {diff['reused']} reused, {diff['to_run']} to run")
    if diff["kept"] is not None:
        print(f"  earlier mini-batches kept: {diff['kept']}; new: {diff['new']}; dropped: {diff['dropped']}")
        print(
            f"  input files new: {diff['inputs_new']}, changed: {diff['inputs_changed']}, "
            f"deleted: {diff['inputs_deleted']}"
        )
    for line in diff["why"]:
        print(f"  dropped {line}")
    return 0
