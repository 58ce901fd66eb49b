"""The report's data: what one run recorded (records.py) reduced to what the page draws.

Everything is computed here, so the page only draws and the tests read the same numbers
the charts show: the summary, the timeline's bars and markers, throughput, durations, the
slowest mini-batches, error groups (`logs/user/error/`: tracebacks, hang dumps) and the
resources (`logs/perf/`: monitor samples).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
import operator
from typing import Any, NamedTuple

from ..errors import signature
from ..store.attempts import Attempts
from ..store.logs import failure_section
from .records import RunRecords, mask_config, natural, read_samples, unix

MAX_BARS = 20_000  # timeline bars drawn one per attempt up to this; past it, neighbours are merged
SLOWEST = 20
THROUGHPUT_BINS = 200
DURATION_BINS = 40
LISTED_MINI_BATCHES = 100  # per error group; the count is always complete
TRACEBACK_CHARS = 6_000
MAX_RSS_LINES = 16  # worker memory lines on the resources chart (the largest)
_NICE_WIDTHS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


# The page's data -----------------------------------------------------------------------------------


def page_data(records: RunRecords, max_bars: int = MAX_BARS) -> dict[str, Any]:
    """Everything the page shows, as JSON data."""
    notes: list[str] = []
    span = records.span
    summary = _summary(records)
    return dict(
        summary=summary,
        config=mask_config(records.summary.get("config") or {}),
        timeline=_timeline(records, summary["reused_from"], max_bars, notes),
        throughput=_throughput(records, span),
        durations=_durations(records.attempts),
        slowest=_slowest(records),
        errors=error_groups(records),
        resources=_resources(records, notes),
        worker_time=records.summary.get("worker_time"),
        notes=notes,
    )


def _summary(records: RunRecords) -> dict[str, Any]:
    summary = records.summary
    keys = (
        "run_id",
        "name",
        "status",
        "status_reason",
        "reused",
        "run_dir",
        "output_file",
        "job_result",
        "started_at",
        "ended_at",
        "elapsed_s",
        "mini_batches_total",
        "mini_batches_succeeded",
        "mini_batches_failed",
        "mini_batches_reused",
        "mini_batches_run",
        "attempts_retried",
        "workers_started",
        "items_total",
        "items_succeeded",
        "items_failed",
        "restarts",
    )
    shown = {key: summary.get(key) for key in keys}
    elapsed = summary.get("elapsed_s") or 0
    attempts = records.attempts
    ran_items = sum(n or 0 for n, outcome in zip(attempts.items_succeeded, attempts.outcome) if outcome == "succeeded")
    shown["attempts"] = len(attempts)
    shown["mini_batches_per_s"] = round(summary.get("mini_batches_run", 0) / elapsed, 3) if elapsed else None
    shown["items_per_s"] = round(ran_items / elapsed, 3) if elapsed else None
    shown["reused_from"] = _reused_from(records)
    return shown


def _reused_from(records: RunRecords) -> dict[str, int]:
    """Reused mini-batches by the run they were taken from (this run's own id: a resume)."""
    if not records.summary.get("mini_batches_reused"):
        return {}  # spares opening the ledger
    return records.reused_from()


def _timeline(records: RunRecords, reused_from: dict[str, int], max_bars: int, notes: list[str]) -> dict[str, Any]:
    attempts = records.attempts
    bars, width = _bars(attempts, max_bars)
    if width is not None:
        notes.append(
            f"The timeline has {len(attempts):,} attempts, more than the {max_bars:,} bars it draws one by one: "
            f"attempts of the same outcome that ran one after another on a worker within {width:g} s are drawn "
            f"as one bar ({len(bars['start_ms']):,} bars; hover shows how many). The other charts and tables count "
            "every attempt; `parallel-steps report RUN --trace FILE` writes them all for a trace viewer."
        )
    reused = records.summary.get("mini_batches_reused") or 0
    if reused:
        sources = ", ".join(f"{run} ({n})" for run, n in reused_from.items())
        notes.append(
            f"{reused:,} mini-batches were reused (from {sources or 'earlier runs'}): they did not run in this "
            "run, so they have no bar; they are counted in the summary."
        )
    started = [e for e in records.events if e["type"] == "worker_started"]
    markers = [dict(worker=e["worker"], t=e["t"], kind="started", label=_started_label(e)) for e in started]
    timed = [e for e in started if e.get("starting_s") is not None]
    starting = dict(  # from when the driver started (or replaced) the worker until it was ready
        worker=[e["worker"] for e in timed],
        start=[round(max(0.0, e["t"] - e["starting_s"]), 3) for e in timed],
        end=[e["t"] for e in timed],
    )
    markers += [
        dict(worker=e["worker"], t=e["t"], kind=e.get("reason"), label=_replacement_label(e, records))
        for e in records.events
        if e["type"] == "worker_replaced"
    ]
    job = [
        dict(t=e["t"], kind=e["type"], label=_job_event_label(e))
        for e in records.events
        if e["type"] in ("restart", "threshold_exceeded", "job_canceled", "job_finished")
    ]
    return dict(
        workers=records.workers(),
        bars=bars,
        merged_within_s=width,
        starting=starting,
        markers=markers,
        job_events=job,
    )


def _bars(attempts: Attempts, max_bars: int) -> tuple[dict[str, list[Any]], float | None]:
    """The timeline's bars, one per attempt. Past `max_bars`, attempts of the same outcome that run one
    after another on a worker are drawn as one bar spanning at most a width, starting at about a
    pixel of the whole timeline and doubled until the bars fit (or span it all: outcomes that
    alternate all the time stay apart). Returns the bars and that width."""
    if len(attempts) <= max_bars:
        bars, width, count = attempts, None, [1] * len(attempts)
        end = attempts.end
        items = attempts.items
    else:
        groups, width = _merged(attempts, max_bars)
        bars, count = attempts.select(group[0] for group in groups), list(map(len, groups))
        end = [max(map(attempts.end.__getitem__, group)) for group in groups]
        items = [
            attempts.items[group[0]] if len(group) == 1 else sum(attempts.items[i] or 0 for i in group)
            for group in groups
        ]
    columns: dict[str, list[Any]] = dict(
        worker=bars.worker,
        start_ms=_milliseconds(bars.start),
        end_ms=_milliseconds(end),
        outcome=bars.outcome,
        mini_batch=bars.mini_batch,
        attempt=bars.attempt,
        items=items,
        count=count,
        error=bars.error,
    )
    return columns, width


def _milliseconds(seconds: list[float]) -> list[int]:
    """Times as whole milliseconds (the precision of the attempts' starts): JSON writes an integer faster
    and shorter than a float, and the page divides them back into seconds."""
    return list(map(round, map(operator.mul, seconds, itertools.repeat(1e3))))


def _merged(attempts: Attempts, max_bars: int) -> tuple[list[list[int]], float]:
    """At most `max_bars` groups of attempts (their indices) to draw as one bar each, and the width they span."""
    by_worker: dict[str, list[int]] = collections.defaultdict(list)
    for i, worker in enumerate(attempts.worker):
        by_worker[worker].append(i)
    span = max(attempts.end)
    width = float(f"{span / 2000:.2g}") or 0.001
    while len(groups := [g for runs in by_worker.values() for g in _merge(attempts, runs, width)]) > max_bars:
        if width > span:
            break
        width *= 2
    return groups, width


def _merge(attempts: Attempts, runs: list[int], width: float) -> list[list[int]]:
    """One worker's attempts (in start order) in groups of one outcome, each spanning at most `width` s."""
    outcome, start, end = attempts.outcome, attempts.start, attempts.end
    groups: list[list[int]] = []
    for i in runs:
        if groups and outcome[groups[-1][0]] == outcome[i] and end[i] - start[groups[-1][0]] <= width:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _started_label(event: dict[str, Any]) -> str:
    gpu = f", GPU {event['gpu']}" if event.get("gpu") is not None else ""
    took = f" after {event['starting_s']:g} s of start-up and init()" if event.get("starting_s") is not None else ""
    return f"ready{took} (pid {event.get('pid')}{gpu})"


def _replacement_label(event: dict[str, Any], records: RunRecords) -> str:
    reason = event.get("reason", "lost")
    label = f"{reason.replace('_', ' ')}: {event.get('detail', '')}"
    if reason == "timed_out":
        label += f"; its stacks are in {records.error_log(event['worker']).relative_to(records.run_dir)}"
    return label


def _job_event_label(event: dict[str, Any]) -> str:
    if event["type"] == "restart":
        return f"restart {event.get('restart')}: {event.get('reason')}"
    if event["type"] == "job_finished":
        return f"{event.get('status')}: {event.get('reason')}"
    return f"{event['type'].replace('_', ' ')}: {event.get('reason')}"


def _throughput(records: RunRecords, span: float) -> dict[str, Any]:
    """Mini-batches and items finished per second, and the average number of busy workers, per bin."""
    width = _nice(span / THROUGHPUT_BINS) if span > 0 else _NICE_WIDTHS[0]
    bins = max(1, math.ceil(span / width))
    ends = map(int, map(operator.truediv, records.attempts.end, itertools.repeat(width)))
    end_bins = list(map(min, ends, itertools.repeat(bins - 1)))  # the bin each attempt ended in
    done, items = _finished(records, end_bins, bins)
    busy = _busy(records.attempts, end_bins, width, bins)
    return dict(
        bin_s=width,
        t=[round(b * width, 3) for b in range(bins)],
        mini_batches_per_s=[round(n / width, 3) for n in done],
        items_per_s=[round(n / width, 3) for n in items],
        busy_workers=[round(s / width, 3) for s in busy],
    )


def _finished(records: RunRecords, end_bins: list[int], bins: int) -> tuple[list[int], list[int]]:
    """Mini-batches (succeeded, or failed for good so far) and items succeeded per bin they ended in."""
    a = records.attempts
    succeeded = [outcome == "succeeded" for outcome in a.outcome]
    last_attempt = records.last_attempts()
    final = map(operator.eq, a.attempt, map(last_attempt.__getitem__, a.mini_batch))  # its mini-batch's last
    ended = collections.Counter(itertools.compress(end_bins, map(operator.or_, succeeded, final)))
    done = [ended[b] for b in range(bins)]
    items = [0] * bins
    for b, count in zip(itertools.compress(end_bins, succeeded), itertools.compress(a.items_succeeded, succeeded)):
        items[b] += count or 0
    return done, items


def _busy(attempts: Attempts, end_bins: list[int], width: float, bins: int) -> list[float]:
    """Seconds of run() per bin: each attempt's share of each bin it spans, added in start order."""
    busy = [0.0] * bins
    first_bins = list(map(int, map(operator.truediv, attempts.start, itertools.repeat(width))))
    within = list(map(operator.eq, first_bins, end_bins))  # most attempts: all their time in one bin
    for b, duration in zip(itertools.compress(first_bins, within), itertools.compress(attempts.duration, within)):
        busy[b] += duration
    across = list(map(operator.not_, within))
    for first, last, start, end in zip(
        *(itertools.compress(column, across) for column in (first_bins, end_bins, attempts.start, attempts.end))
    ):
        for b in range(first, last + 1):
            busy[b] += min(end, (b + 1) * width) - max(start, b * width)
    return busy


def _durations(attempts: Attempts) -> dict[str, Any] | None:
    if not attempts:
        return None
    values = sorted(attempts.duration)
    top = values[-1] or 1e-3
    width = top / DURATION_BINS
    counts = [0] * DURATION_BINS
    for b, n in collections.Counter(map(int, map(operator.truediv, values, itertools.repeat(width)))).items():
        counts[min(DURATION_BINS - 1, b)] += n
    return dict(
        edges=[round(i * width, 6) for i in range(DURATION_BINS + 1)],
        counts=counts,
        mean=round(sum(values) / len(values), 4),
        **{name: round(_percentile(values, q), 4) for name, q in (("p50", 50), ("p90", 90), ("p99", 99))},
        max=round(values[-1], 4),
    )


def _slowest(records: RunRecords) -> list[dict[str, Any]]:
    """The slowest mini-batches (their longest attempt), with their inputs and worker."""
    a = records.attempts
    top: list[int] = []  # the index of each one's longest attempt (the first of equals), longest first
    shown: set[int] = set()
    for i in sorted(range(len(a)), key=a.duration.__getitem__, reverse=True):  # equals keep their order
        if a.mini_batch[i] not in shown:
            shown.add(a.mini_batch[i])
            top.append(i)
            if len(top) == SLOWEST:
                break
    sources = {row["idx"]: row["source"] for row in records.ledger_rows(a.mini_batch[i] for i in top)}
    return [
        dict(
            mini_batch=a.mini_batch[i],
            attempt=a.attempt[i],
            outcome=a.outcome[i],
            worker=a.worker[i],
            duration_s=round(a.duration[i], 3),
            start_s=a.start[i],
            items=a.items[i],
            source=sources.get(a.mini_batch[i], ""),
        )
        for i in top
    ]


class _Failure(NamedTuple):
    error: str
    outcome: str
    mini_batch: int | None  # None: init() failed
    attempt: int | None
    worker: str
    t: float
    final: bool  # the mini-batch's last attempt (it failed for good, unless the run stopped first)


def error_groups(records: RunRecords) -> list[dict[str, Any]]:
    """Each distinct error (numbers, strings and paths masked, as the driver groups them): how many
    attempts it failed, which mini-batches, the first traceback and the log to open. init() failures
    come from the events (their workers never ran an attempt)."""
    last_attempt = records.last_attempts()
    a = records.attempts
    failed = a.select(i for i, outcome in enumerate(a.outcome) if outcome != "succeeded")
    failures = [
        _Failure(error or outcome, outcome, mini_batch, attempt, worker, t, last_attempt[mini_batch] == attempt)
        for error, outcome, mini_batch, attempt, worker, t in zip(
            failed.error, failed.outcome, failed.mini_batch, failed.attempt, failed.worker, failed.start
        )
    ]
    failures += [
        _Failure(e.get("detail") or "init() failed", "init_failed", None, None, e["worker"], e["t"], False)
        for e in records.events
        if e["type"] == "worker_replaced" and e.get("reason") == "init_failed"
    ]
    signatures = {error: signature(error) for error in {f.error for f in failures}}  # one per distinct error
    groups: dict[str, list[_Failure]] = {}
    for failure in sorted(failures, key=lambda f: f.t):
        groups.setdefault(signatures[failure.error], []).append(failure)
    return [_group(group, records) for group in sorted(groups.values(), key=len, reverse=True)]


def _group(failures: list[_Failure], records: RunRecords) -> dict[str, Any]:
    first = failures[0]
    paths = records.worker_logs(first.worker, create=False)
    traceback = failure_section(paths, first.mini_batch, first.attempt, TRACEBACK_CHARS)
    log = paths.error if traceback else paths.stderr  # a crash leaves no traceback; its stderr may tell
    mini_batches = sorted({f.mini_batch for f in failures if f.mini_batch is not None})
    return dict(
        error=first.error,
        signature=signature(first.error),
        count=len(failures),
        outcomes=dict(collections.Counter(f.outcome for f in failures)),
        mini_batches=mini_batches[:LISTED_MINI_BATCHES],
        mini_batches_count=len(mini_batches),
        mini_batches_failed=len({f.mini_batch for f in failures if f.final}),
        first=dict(mini_batch=first.mini_batch, attempt=first.attempt, worker=first.worker, t=first.t),
        log=str(log.relative_to(records.run_dir)),
        traceback=traceback,
    )


def _resources(records: RunRecords, notes: list[str]) -> dict[str, Any]:
    """Machine CPU and memory per node, and the largest workers' memory, from the monitor's samples."""
    config = records.summary.get("config") or {}
    interval = config.get("resource_monitor_interval")
    perf = records.logs.root / "perf"
    since = unix(records.summary.get("started_at")) or records.origin
    nodes: dict[str, dict[str, list[Any]]] = {}
    workers: dict[str, list[tuple[float, float]]] = {}
    for folder in sorted(perf.glob("*"), key=lambda p: natural(p.name)) if perf.is_dir() else []:
        node = read_samples(folder / "node_resource_usage.csv", since, records.origin)
        if node:
            nodes[folder.name] = {
                key: [row[key] for row in node] for key in ("t", "cpu_percent", "memory_percent", "memory_used_mb")
            }
        by_process = collections.defaultdict(list)
        for row in read_samples(folder / "processes_resource_usage.csv", since, records.origin):
            if row.get("rss_mb") is not None:
                by_process[f"{folder.name}/{row['process_name']}"].append((row["t"], row["rss_mb"]))
        workers.update(by_process)
    largest = sorted(workers, key=lambda w: -max(rss for _, rss in workers[w]))[:MAX_RSS_LINES]
    if len(workers) > len(largest):
        notes.append(f"Worker memory: the {len(largest)} workers with the highest peak of {len(workers)} are drawn.")
    samples = max((len(n["t"]) for n in nodes.values()), default=0)
    if interval == 0:
        notes.append("The resource monitor was off (resource_monitor_interval: 0): no resource chart.")
    elif samples:
        notes.append(
            f"Resources were sampled every {interval:g} s (resource_monitor_interval), and at the start and end: "
            f"{samples} samples per node."
        )
    oom = [
        dict(t=e["t"], worker=e.get("worker"), label=e.get("detail", ""))
        for e in records.events
        if e["type"] == "worker_replaced" and e.get("reason") == "out_of_memory"
    ]
    return dict(
        nodes=nodes,
        workers={w: dict(t=[t for t, _ in workers[w]], rss_mb=[r for _, r in workers[w]]) for w in largest},
        oom=oom,
    )


# Helpers ------------------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return values[max(0, math.ceil(q / 100 * len(values)) - 1)]


def _nice(width: float) -> float:
    """The smallest round bin width at least `width`."""
    i = bisect.bisect_left(_NICE_WIDTHS, width)
    return _NICE_WIDTHS[i] if i < len(_NICE_WIDTHS) else math.ceil(width / 3600) * 3600
