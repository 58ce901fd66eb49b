"""The `parallel-steps` command line: a thin adapter over the step API.

Exit status: 0 the run succeeded (or was reused), 1 it failed or was canceled,
2 invalid configuration or usage (one line naming the field or file).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .errors import ConfigError, InputError, ParallelStepsError, StepFailed, first_line

# Fields that have a dedicated option besides --FIELD (or that are not options at all).
_SPECIAL = {"inputs"}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["node"]:  # its own parser: --help and options before STEP.yaml must reach it
        from .launch import main as node_main

        return node_main(argv[1:])
    script_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1 :]
    args = parser.parse_args(argv)
    args.script_args = script_args
    try:
        return args.command(args)
    except (ConfigError, InputError, ParallelStepsError) as exc:
        print(f"parallel-steps: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("parallel-steps: interrupted", file=sys.stderr)
        return 1


# Options ------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parallel-steps", description="Run a ParallelRunStep-style parallel batch step."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run a step",
        description="Run a step: STEP.yaml and/or options. Arguments after -- go to the entry script.",
    )
    _step_options(run, every_field=True)
    run.add_argument("--run-dir", help="run directory (a rerun in the same directory resumes it)")
    run.add_argument("--detach", action="store_true", help="run in the background; print the run id and directory")
    run.add_argument("--json", action="store_true", help="print the run summary as one JSON object on stdout")
    run.set_defaults(command=_run)

    plan = commands.add_parser("plan", help="show how the inputs split into mini-batches")
    _step_options(plan, every_field=False)
    plan.add_argument("--show", type=int, default=5, metavar="N", help="mini-batches to list (default 5)")
    plan.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    plan.set_defaults(command=_plan)

    status = _job_command(commands, "status", _status, "the state and counts of a run (finished or running)")
    status.add_argument(
        "--mini-batches", action="store_true", help="each mini-batch's state, attempts, error, worker and duration"
    )
    status.add_argument("--json", action="store_true")
    wait = _job_command(commands, "wait", _wait, "wait for a run to end; exit 0 if it succeeded, else 1")
    wait.add_argument("--timeout", type=float, help="give up after this many seconds (exit 1)")
    wait.add_argument("--json", action="store_true")
    _job_command(commands, "cancel", _cancel, "stop a run (its workers are stopped within seconds)")
    report = _job_command(
        commands, "report", _report, "write a run's report page: timeline per worker, throughput, errors, resources"
    )
    report.add_argument("-o", "--output", metavar="FILE", help="the page's path (default RUN/logs/report.html)")
    report.add_argument(
        "--trace", metavar="FILE", help="also write the timeline as Chrome trace JSON (Perfetto, chrome://tracing)"
    )
    logs = _job_command(commands, "logs", _logs, "the driver's log, workers' stderr, or one mini-batch's story")
    logs.add_argument(
        "--mini-batch", type=int, metavar="ID", help="attempts, journal lines and tracebacks of one mini-batch"
    )
    logs.add_argument("--stderr", action="store_true", help="workers' stderr")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the run ends")

    runs = commands.add_parser("runs", help="list runs with status, key, time and counts")
    runs.add_argument("--name", help="only runs of this step name")
    runs.add_argument("--run-root", help="default PARALLEL_STEPS_HOME or ./.parallel_steps")
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(command=_runs)
    clean = commands.add_parser("clean", help="remove old run directories (never a running one)")
    clean.add_argument("--older-than", metavar="AGE", help="remove runs that ended longer ago than AGE (30m, 12h, 7d)")
    clean.add_argument("--keep", type=int, metavar="N", help="keep the N newest runs, remove the rest")
    clean.add_argument("--name", help="only runs of this step name")
    clean.add_argument("--run-root", help="default PARALLEL_STEPS_HOME or ./.parallel_steps")
    clean.set_defaults(command=_clean)

    # Listed for the help only: main() hands `node ...` to parallel_steps.launch, which has its own options.
    commands.add_parser(
        "node", add_help=False, help="run on every node of a multi-node job (Ray); see `parallel-steps node --help`"
    )
    return parser


def _job_command(commands, name: str, handler, help_text: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("run", metavar="RUN", help="run id or run directory")
    parser.add_argument(
        "--run-root", help="where run ids are looked up (default PARALLEL_STEPS_HOME or ./.parallel_steps)"
    )
    parser.set_defaults(command=handler)
    return parser


def _step_options(parser: argparse.ArgumentParser, every_field: bool) -> None:
    from .config import ParallelRunConfig

    parser.add_argument("step_file", nargs="?", metavar="STEP.yaml", help="step file (YAML with configuration fields)")
    parser.add_argument(
        "--input",
        action="append",
        dest="input",
        metavar="PATH",
        help="input file, folder or glob (repeatable); replaces the step file's inputs",
    )
    parser.add_argument("--tabular", action="store_true", help="read --input as tables (CSV, Parquet, JSON lines)")
    parser.add_argument("--format", choices=["csv", "parquet", "jsonl"], help="table format of --input")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override any configuration field (repeatable)",
    )
    partitioning = ("mini_batch_size", "partition_keys", "reuse_fingerprint")
    fields = ParallelRunConfig.model_fields
    for name, field in fields.items():
        if name in _SPECIAL or (not every_field and name not in partitioning):
            continue
        parser.add_argument(
            f"--{name.replace('_', '-')}", dest=f"field_{name}", metavar="VALUE", help=field.description
        )


def _config(args: argparse.Namespace):
    """The config from the step file, then the options, then --set (the last wins)."""
    from .config import ParallelRunConfig

    values: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith("field_") and value is not None:
            values[key[6:]] = value
    if args.input:
        if args.tabular or args.format:
            values["inputs"] = [{"type": "tabular", "path": p, "format": args.format} for p in args.input]
        else:
            values["inputs"] = list(args.input)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"{item!r} is not FIELD=VALUE")
        values[key.strip().replace("-", "_")] = value
    if getattr(args, "script_args", None):
        values["arguments"] = args.script_args
    if args.step_file:
        return ParallelRunConfig.from_yaml(args.step_file, **values)
    return ParallelRunConfig.from_dict(values)


# run ----------------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from .driver import Cancel
    from .step import run_step

    config = _config(args)
    if args.detach:
        from .jobs import submit

        handle = submit(config, run_dir=args.run_dir)
        summary = handle.summary()
        print(json.dumps(summary) if args.json else f"{summary['run_id']} {handle.run_dir}")
        return 0
    cancel = Cancel()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda num, _: cancel.cancel(f"canceled by the user ({signal.Signals(num).name})"))
    progress = _Progress()
    try:
        summary = run_step(config, run_dir=args.run_dir, on_progress=progress.update, cancel=cancel)
        code = 0
    except StepFailed as failed:
        summary, code = failed.summary, 1
    finally:
        progress.close()
    _print_summary(summary, args.json)
    return code


class _Progress:
    """A live progress bar on a terminal; a plain line every 10 s otherwise (logs, CI)."""

    _PLAIN_EVERY_S = 10.0

    def __init__(self):
        self._live = sys.stderr.isatty()
        self._bar = None
        self._last_line = 0.0

    def update(self, snapshot: dict[str, Any]) -> None:
        if self._live:
            self._update_bar(snapshot)
        elif time.monotonic() - self._last_line >= self._PLAIN_EVERY_S:
            self._last_line = time.monotonic()
            print(f"[{time.strftime('%H:%M:%S')}] {_progress_line(snapshot)}", file=sys.stderr, flush=True)

    def _update_bar(self, snapshot: dict[str, Any]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        if self._bar is None:
            self._bar = Progress(
                TextColumn("mini-batches"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=snapshot["mini_batches_total"], detail="")
        detail = (
            f"items {snapshot['items_succeeded']} ok, {snapshot['items_failed']} failed, {snapshot['rate_per_s']:.1f}/s"
        )
        self._bar.update(self._task, completed=snapshot["mini_batches_done"], detail=detail)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _progress_line(snapshot: dict[str, Any]) -> str:
    total, done = snapshot["mini_batches_total"], snapshot["mini_batches_done"]
    eta = "?" if snapshot["eta_s"] is None else f"{snapshot['eta_s']:.0f} s"
    return (
        f"{done}/{total} mini-batches ({100 * done / max(total, 1):.0f}%), {snapshot['items_succeeded']} items ok, "
        f"{snapshot['items_failed']} failed, {snapshot['rate_per_s']:.1f}/s, ETA {eta}"
    )


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, default=str))
        return
    lines = [
        f"{summary['status']}: {summary['status_reason']}",
        f"  run:          {summary['run_id']}{' (reused)' if summary.get('reused') else ''}",
        f"  mini-batches: {summary['mini_batches_succeeded']} succeeded, {summary['mini_batches_failed']} failed, "
        f"{summary['mini_batches_reused']} reused, of {summary['mini_batches_total']}",
        f"  items:        {summary['items_succeeded']} succeeded, {summary['items_failed']} failed",
        f"  output:       {summary.get('output_file') or summary.get('output')}",
        f"  logs:         {Path(summary['run_dir']) / 'logs'}",
    ]
    if summary.get("report"):
        lines.append(f"  report:       {summary['report']}")
    print("\n".join(lines))


# plan ---------------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    from .inputs.planner import Planner

    config = _config(args)
    if not config.inputs:
        raise ConfigError("inputs", "no inputs given", "use --input PATH, or inputs: in the step file")
    planner = Planner(config.inputs, config.batch_size, config.partition_keys, config.reuse_fingerprint)
    items, sizes, first = [], [], []
    for mini_batch in planner.mini_batches():
        items.append(mini_batch.items)
        sizes.append(mini_batch.nbytes)
        if len(first) < args.show:
            first.append(
                dict(id=mini_batch.index, items=mini_batch.items, bytes=mini_batch.nbytes, source=mini_batch.describe())
            )
    known = [n for n in items if n is not None]
    plan = dict(
        mini_batches=len(items),
        items=sum(known) if len(known) == len(items) else None,
        bytes=sum(sizes),
        unit="files" if not config.is_tabular else "rows",
        batch_size=config.batch_size,
        items_per_batch=_spread(known) if len(known) == len(items) else None,
        bytes_per_batch=_spread(sizes),
        first=first,
        notes=planner.notes,
    )
    if args.json:
        print(json.dumps(plan))
        return 0
    per = plan["items_per_batch"]
    print(
        f"{plan['mini_batches']} mini-batches, {plan['items'] if plan['items'] is not None else 'unknown'} "
        f"{plan['unit']}, {plan['bytes']} bytes"
    )
    if per:
        print(f"{plan['unit']} per mini-batch: min {per['min']}, median {per['median']}, max {per['max']}")
    spread = plan["bytes_per_batch"]
    print(f"bytes per mini-batch: min {spread['min']}, median {spread['median']}, max {spread['max']}")
    for batch in first:
        print(
            f"  #{batch['id']}: {batch['items'] if batch['items'] is not None else '?'} {plan['unit']}, "
            f"{batch['bytes']} bytes  {batch['source']}"
        )
    for note in plan["notes"]:
        print(f"note: {note}")
    return 0


def _spread(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    return dict(min=min(values), median=statistics.median(values), max=max(values))


# status -------------------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    from .jobs import run_status

    _print_status(run_status(args.run, args.run_root, mini_batches=args.mini_batches), args.json)
    return 0


def _wait(args: argparse.Namespace) -> int:
    from .jobs import wait

    try:
        summary = wait(args.run, args.run_root, timeout=args.timeout)
    except TimeoutError as exc:
        print(f"parallel-steps: {exc}", file=sys.stderr)
        return 1
    _print_status(summary, args.json)
    return 0 if summary["status"] == "Succeeded" else 1


def _cancel(args: argparse.Namespace) -> int:
    from .jobs import cancel

    summary = cancel(args.run, args.run_root)
    print(f"cancel requested for {summary['run_id']} ({summary['status']})")
    return 0


def _report(args: argparse.Namespace) -> int:
    from .jobs import resolve_run, run_status
    from .report import write_report, write_trace

    run_dir = resolve_run(args.run, args.run_root)
    summary = run_status(str(run_dir))  # a running run's counts are live
    print(f"report: {write_report(run_dir, summary, output=args.output)}")
    if args.trace:
        print(f"trace:  {write_trace(run_dir, args.trace)}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from .jobs import logs

    for text in logs(args.run, args.run_root, mini_batch=args.mini_batch, stderr=args.stderr, follow=args.follow):
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _runs(args: argparse.Namespace) -> int:
    from .jobs import list_runs

    records = list_runs(args.run_root, args.name)
    if args.json:
        print(
            json.dumps(
                [{k: v for k, v in r.items() if k != "summary"} | {"counts": _counts(r["summary"])} for r in records],
                default=str,
            )
        )
        return 0
    for record in records:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["started_at"] or 0))
        counts = _counts(record["summary"])
        print(
            f"{record['run_id']:<40} {record['status']:<9} key {str(record['step_key'] or '-')[:12]:<12} "
            f"{started}  {counts['mini_batches_succeeded']}/{counts['mini_batches_total']} mini-batches, "
            f"{counts['items_failed']} items failed"
        )
    return 0


def _counts(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        key: summary.get(key, 0)
        for key in (
            "mini_batches_total",
            "mini_batches_succeeded",
            "mini_batches_failed",
            "items_succeeded",
            "items_failed",
        )
    }


def _clean(args: argparse.Namespace) -> int:
    from .jobs import clean, parse_age

    older = parse_age(args.older_than) if args.older_than else None
    removed = clean(args.run_root, older_than_s=older, keep=args.keep, name=args.name)
    print(f"removed {len(removed)} run(s)" + "".join(f"\n  {run_id}" for run_id in removed))
    return 0


def _print_status(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(status, default=str))
        return
    print(f"{status['run_id']}: {status['status']} ({status['status_reason']})")
    for key in (
        "mini_batches_total",
        "mini_batches_succeeded",
        "mini_batches_failed",
        "mini_batches_pending",
        "mini_batches_reused",
        "items_succeeded",
        "items_failed",
        "run_dir",
        "output_file",
    ):
        if status.get(key) is not None:
            print(f"  {key}: {status[key]}")
    for row in status.get("mini_batches", []):
        code = "" if row["exit_code"] is None else f" exit_code={row['exit_code']}"
        print(
            f"  #{row['idx']:<6} {row['state']:<9} attempts={row['attempts']} worker={row['worker'] or '-'} "
            f"duration={row['duration'] or 0:.3f}s{code} {row['error'] or ''} {row['source']}"
        )


if __name__ == "__main__":
    sys.exit(main())
