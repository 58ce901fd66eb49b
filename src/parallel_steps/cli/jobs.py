"""The job-control commands: `status`, `wait`, `cancel`, `logs`, `runs` and `clean`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _job_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help_text: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("run", metavar="RUN", help="run id or run directory")
    parser.add_argument(
        "--run-root", help="where run ids are looked up (default PARALLEL_STEPS_HOME or ./.parallel_steps)"
    )
    parser.set_defaults(command=handler)
    return parser


def _status(args: argparse.Namespace) -> int:
    from ..jobs import run_status

    _print_status(run_status(args.run, args.run_root, mini_batches=args.mini_batches), args.json)
    return 0


def _wait(args: argparse.Namespace) -> int:
    from ..jobs import wait

    try:
        summary = wait(args.run, args.run_root, timeout=args.timeout)
    except TimeoutError as exc:
        print(f"parallel-steps: {exc}", file=sys.stderr)
        return 1
    _print_status(summary, args.json)
    return 0 if summary["status"] == "Succeeded" else 1


def _cancel(args: argparse.Namespace) -> int:
    from ..jobs import cancel

    summary = cancel(args.run, args.run_root)
    print(f"cancel requested for {summary['run_id']} ({summary['status']})")
    return 0


def _report(args: argparse.Namespace) -> int:
    from ..jobs import resolve_run, run_status
    from ..report import write_report, write_trace

    run_dir = resolve_run(args.run, args.run_root)
    summary = run_status(str(run_dir))  # a running run's counts are live
    print(f"report: {write_report(run_dir, summary, output=args.output)}")
    if args.trace:
        print(f"trace:  {write_trace(run_dir, args.trace)}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    from ..jobs import logs

    for text in logs(args.run, args.run_root, mini_batch=args.mini_batch, stderr=args.stderr, follow=args.follow):
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _runs(args: argparse.Namespace) -> int:
    from ..jobs import list_runs

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
    _print_pipeline_runs(args.run_root, args.name)
    return 0


def _print_pipeline_runs(run_root: str | None, name: str | None) -> None:
    """Pipeline files' runs, each with its pipeline's name and file: two files of one name are two pipelines."""
    from ..azure.pipeline_run import pipeline_runs

    runs = [run for run in pipeline_runs(run_root) if name is None or run["name"] == name]
    if runs:
        print("pipelines:")
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run["started_at"] or 0))
        print(f"{run['run_id']:<40} {run['status']:<9} {started}  {run['jobs']} job(s)  {run['name']} ({run['file']})")


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
    from ..jobs import clean, parse_age

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
