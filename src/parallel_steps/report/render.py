"""Rendering the report: the HTML page (page.py, with BokehJS inlined), the Chrome trace, and the short
texts the engines show (key figures, a markdown summary).

The page draws with BokehJS in the browser from the embedded data, so writing it costs no import
of a plotting library in Python: only reading its JavaScript files, which the `bokeh` package ships.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..store.attempts import Attempts
from ..store.space import cannot_write, write_cause, write_site
from ..version import __version__
from .data import MAX_BARS, error_groups, page_data
from .page import page, seconds
from .records import RunRecords, read_run

_BOKEH_FILES = ("bokeh.min.js", "bokeh-api.min.js")  # the library and its plotting API, as the page uses them
_MARKDOWN_ERRORS = 20


def default_path(run_dir: str | Path) -> Path:
    """Where a run's report is written: `logs/report.html` in its folder."""
    return Path(run_dir) / "logs" / "report.html"


def write_report(
    run_dir: str | Path,
    summary: Mapping[str, Any] | None = None,
    output: str | Path | None = None,
    max_bars: int = MAX_BARS,
    attempts: Attempts | None = None,
) -> Path:
    """Write the run's report page (default `logs/report.html`); returns its path.

    Args:
        run_dir: the run folder.
        summary: the run summary (default: the folder's run.json).
        output: the page's path.
        max_bars: timeline bars drawn one per attempt; past it, neighbouring attempts are merged.
        attempts: the attempts of the run's latest invocation, when the caller holds them (its driver):
            spares reading them back from processed_mini-batches.csv.
    """
    records = read_run(run_dir, summary, attempts)
    target = Path(output) if output else default_path(run_dir)
    _write(target, render_html(page_data(records, max_bars)))
    return target


def write_run_report(run_dir: Path, summary: Mapping[str, Any], attempts: Attempts, log: logging.Logger) -> str | None:
    """The report written at the end of a run, from the attempts its driver recorded: bookkeeping, so one that
    cannot be written never fails the run. A write the disk refuses is one warning line naming the page, the cause
    and how to write it later (store/space.py); any other error is logged with its traceback."""
    try:
        path = write_report(run_dir, summary, attempts=attempts)
    except Exception as exc:
        if not cannot_write(exc):
            log.exception("the run report could not be written")
            return None
        logging.getLogger(__name__).warning(  # where the run's one line is told (stderr, the task log), not its log
            "%s: %s; the report was not written (the run's result stands; `parallel-steps report %s` writes it)",
            getattr(exc, "filename", None) or default_path(run_dir),
            write_cause(exc),
            run_dir,
        )
        return None
    log.info("report: %s", path)
    return str(path)


def write_trace(run_dir: str | Path, output: str | Path) -> Path:
    """Write the run's timeline as Chrome trace JSON (chrome://tracing, Perfetto); returns its path."""
    target = Path(output)
    _write(target, json.dumps(chrome_trace(read_run(run_dir)), separators=(",", ":")))
    return target


def render_html(data: dict[str, Any]) -> str:
    """The page, with the data embedded once as JSON and BokehJS inlined."""
    embedded = json.dumps(data, separators=(",", ":"), default=str).replace("<", "\\u003c")  # no </script> in it
    return page(data, embedded, _bokeh_js(), __version__, time.strftime("%Y-%m-%d %H:%M:%S"))


@functools.cache
def _bokeh_js() -> str:
    """BokehJS from the installed `bokeh` package, found without importing it (that takes most of a second)."""
    spec = importlib.util.find_spec("bokeh")
    if spec is None or spec.origin is None:
        raise RuntimeError("the bokeh package is not installed (pip install bokeh)")
    folder = Path(spec.origin).parent / "server" / "static" / "js"
    return "\n".join((folder / name).read_text(encoding="utf-8") for name in _BOKEH_FILES)


def _write(path: Path, text: str) -> None:
    """Whole or not at all: written beside, then renamed; nothing is left of a write that failed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write_site("report", path)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        exc.filename = exc.filename or str(path)  # a failed write names no file: the page it was for
        raise
    finally:
        tmp.unlink(missing_ok=True)


# The trace -----------------------------------------------------------------------------------------


def chrome_trace(records: RunRecords) -> dict[str, Any]:
    """The Trace Event Format: a process per node, a thread (track) per worker, a complete event per
    attempt and an instant event per worker start, loss and job event. Times in microseconds since
    the driver started (`otherData.origin_unix_s`)."""
    workers = records.workers()
    pid = {node: i for i, node in enumerate(dict.fromkeys(_node(w) for w in workers))}
    tid = {worker: i + 1 for i, worker in enumerate(workers)}
    events: list[dict[str, Any]] = [
        dict(name="process_name", ph="M", pid=pid[node], tid=0, args=dict(name=node)) for node in pid
    ]
    events += [dict(name="thread_name", ph="M", pid=pid[_node(w)], tid=tid[w], args=dict(name=w)) for w in workers]
    a = records.attempts
    for mini_batch, attempt, outcome, start, duration, worker, items, error in zip(
        a.mini_batch, a.attempt, a.outcome, a.start, a.duration, a.worker, a.items, a.error
    ):
        events.append(
            dict(
                name=f"mini-batch {mini_batch}",
                cat=outcome,
                ph="X",
                ts=round(start * 1e6),
                dur=round(duration * 1e6),
                pid=pid[_node(worker)],
                tid=tid[worker],
                args=dict(mini_batch=mini_batch, attempt=attempt, outcome=outcome, items=items, error=error),
            )
        )
    for e in records.events:
        worker = e.get("worker")
        where = dict(pid=pid[_node(worker)], tid=tid[worker], s="t") if worker else dict(pid=0, tid=0, s="g")
        name = e["type"].replace("_", " ") + (f": {e['reason']}" if e["type"] == "worker_replaced" else "")
        args = {k: v for k, v in e.items() if k not in ("type", "time", "t")}
        events.append(dict(name=name, cat="event", ph="i", ts=round(e["t"] * 1e6), args=args, **where))
    return dict(
        traceEvents=events,
        displayTimeUnit="ms",
        otherData=dict(run_id=records.summary.get("run_id"), origin_unix_s=records.origin),
    )


def _node(worker: str) -> str:
    return worker.split("/", 1)[0]


# Texts for the engines -----------------------------------------------------------------------------


def key_figures(summary: Mapping[str, Any]) -> str:
    """The run in one line: status, counts, items, time and throughput."""
    elapsed = summary.get("elapsed_s") or 0
    ran = summary.get("mini_batches_run") or 0
    rate = f", {ran / elapsed:.3g} mini-batches/s" if elapsed and ran else ""
    retried = summary.get("attempts_retried") or 0
    return (
        f"{summary.get('status')} in {seconds(elapsed)}{rate}: {summary.get('mini_batches_succeeded')} of "
        f"{summary.get('mini_batches_total')} mini-batches succeeded, {summary.get('mini_batches_failed')} failed, "
        f"{summary.get('mini_batches_reused')} reused, {retried} attempt{'s' if retried != 1 else ''} retried; "
        f"{summary.get('items_succeeded')} items succeeded, {summary.get('items_failed')} failed"
    )


def report_markdown(summary: Mapping[str, Any]) -> str:
    """The run as markdown: key figures, the error groups and where the report is."""
    lines = [
        f"### Step {summary.get('name')}: {summary.get('status')}",
        "",
        _cell(summary.get("status_reason")),
        "",
        key_figures(summary) + ".",
        "",
        _report_line(summary),
    ]
    if summary.get("reused"):
        return "\n".join([*lines, "", "The whole step was reused from an earlier run: nothing ran."]) + "\n"
    groups = error_groups(read_run(summary["run_dir"], summary))
    lines += ["", f"#### Errors ({len(groups)} distinct)", ""]
    if groups:
        lines += ["| failed attempts | mini-batches | error | first | log |", "| ---: | --- | --- | --- | --- |"]
        for group in groups[:_MARKDOWN_ERRORS]:
            first = group["first"]
            where = f"mini-batch {first['mini_batch']}" if first["mini_batch"] is not None else "init()"
            listed = ", ".join(map(str, group["mini_batches"][:10]))
            more = group["mini_batches_count"] - min(10, len(group["mini_batches"]))
            lines.append(
                f"| {group['count']} | {listed}{f' and {more} more' if more > 0 else ''} | `{_cell(group['error'])}` "
                f"| {where} on {first['worker']} | `{group['log']}` |"
            )
        if len(groups) > _MARKDOWN_ERRORS:
            lines.append(f"\n{len(groups) - _MARKDOWN_ERRORS} more in the report.")
    else:
        lines.append("No errors.")
    return "\n".join(lines) + "\n"


def _cell(text: Any) -> str:
    """Text safe inside a markdown table cell or code span."""
    return str(text or "").replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _report_line(summary: Mapping[str, Any]) -> str:
    if summary.get("report"):
        return f"Report: `{summary['report']}`"
    if not summary.get("config", {}).get("report", True):
        return "No report was written (`report: false`)."
    return "The report could not be written (see `logs/sys/master_role.txt`)."
