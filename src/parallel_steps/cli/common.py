"""What the `parallel-steps` commands share: the step's config from a file and options, `--set`,
the `--` split, signals that cancel a run, where progress shows and the summary printed at the end."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import ParallelRunConfig, layered_config
from ..control import Cancel, exit_when_overdue
from ..errors import ConfigError
from ..jobs import RunHooks
from ..report.text import Throttle, items_and_rate, items_text, progress_line
from ..summary import RunSummary

# Fields that have a dedicated option besides --FIELD (or that are not options at all).
_SPECIAL = {"inputs"}


def split_script_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """The command's own arguments, and those after `--` (for the entry script; None: no `--`)."""
    if "--" not in argv:
        return argv, None
    split = argv.index("--")
    return argv[:split], argv[split + 1 :]


def parse_set(items: list[str]) -> dict[str, str]:
    """`--set FIELD=VALUE` options as fields (dashes in names are underscores)."""
    fields = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--set", f"{item!r} is not FIELD=VALUE")
        fields[key.strip().replace("-", "_")] = value
    return fields


def add_step_options(parser: argparse.ArgumentParser, every_field: bool) -> None:
    """STEP.yaml, --input, --set, and a --FIELD option per configuration field (or the partitioning ones)."""
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
    for name, field in ParallelRunConfig.model_fields.items():
        if name in _SPECIAL or (not every_field and name not in partitioning):
            continue
        parser.add_argument(
            f"--{name.replace('_', '-')}", dest=f"field_{name}", metavar="VALUE", help=field.description
        )


def config_from_args(args: argparse.Namespace, script_args: list[str] | None) -> ParallelRunConfig:
    """The config from the step file, then the options, then --set (the last wins)."""
    values: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith("field_") and value is not None:
            values[key[6:]] = value
    if args.input:
        if args.tabular or args.format:
            values["inputs"] = [{"type": "tabular", "path": p, "format": args.format} for p in args.input]
        else:
            values["inputs"] = list(args.input)
    values.update(parse_set(args.set))
    if script_args:
        values["arguments"] = script_args
    return layered_config(args.step_file, values)


def cancel_on_signals(grace: float | None = None) -> Cancel:
    """SIGINT and SIGTERM cancel the run gracefully; a second one stops it at once. With a `grace` (the
    step's termination_grace), the command exits by itself when the run has not ended by then."""
    cancel = Cancel()

    def handle(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if cancel.is_set():
            print(f"parallel-steps: {name} again: stopping every worker now", file=sys.stderr, flush=True)
        cancel.cancel(f"canceled by the user ({name})")
        if grace is not None:
            exit_when_overdue(cancel, grace)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)
    return cancel


def print_summary(summary: RunSummary, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, default=str))
        return
    lines = [
        f"{summary['status']}: {summary['status_reason']}",
        f"  run:          {summary['run_id']}{' (reused)' if summary.get('reused') else ''}",
        f"  mini-batches: {summary['mini_batches_succeeded']} succeeded, {summary['mini_batches_failed']} failed, "
        f"{summary['mini_batches_reused']} reused, of {summary['mini_batches_total']}",
        f"  items:        {items_text(summary)}",
        *_partitions_line(summary),
        f"  output:       {summary.get('output_file') or summary.get('output')}",
        f"  logs:         {Path(summary['run_dir']) / 'logs'}",
    ]
    if summary.get("report"):
        lines.append(f"  report:       {summary['report']}")
    print("\n".join(lines))


def _partitions_line(summary: RunSummary) -> list[str]:
    """A step over partitions: how many succeeded, and the keys of those that failed."""
    if "partitions" not in summary:
        return []
    failed = summary["partitions_failed"]
    line = f"  partitions:   {len(summary['partitions']) - len(failed)} succeeded, {len(failed)} failed"
    return [line + (f" ({', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''})" if failed else "")]


class Progress(RunHooks):
    """What the CLI shows of a running run: a live progress bar on a terminal, a plain line every 10 s
    otherwise (logs, CI); warnings on stderr."""

    _PLAIN_EVERY_S = 10.0

    def __init__(self) -> None:
        self._live = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._plain = Throttle(self._PLAIN_EVERY_S)

    def progress(self, snapshot: Mapping[str, Any]) -> None:
        if self._live:
            self._update_bar(snapshot)
        elif self._plain.due(snapshot):
            print(f"[{time.strftime('%H:%M:%S')}] {progress_line(snapshot)}", file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        print(f"parallel-steps: {message}", file=sys.stderr, flush=True)

    def _update_bar(self, snapshot: Mapping[str, Any]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        total, done = snapshot.get("mini_batches_total", 0), snapshot.get("mini_batches_done", 0)
        if self._bar is None:
            self._bar = Bar(
                TextColumn("mini-batches"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=total, detail="")
        self._bar.update(self._task, total=total, completed=done, detail=items_and_rate(snapshot))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
