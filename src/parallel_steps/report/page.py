"""The report page's HTML: the texts and tables written here, the charts drawn in the browser by BokehJS
(page.js) from the data embedded once as JSON (#report-data), the styles in page.css.

Plain string building rather than a template engine: importing Jinja and compiling a template cost more
than the rest of writing the page. Every value from the run goes through `_e` (HTML-escaped); the rest is
the page's own markup. Each section is a list of lines.
"""

from __future__ import annotations

import functools
import html
import json
from pathlib import Path
from typing import Any


def page(data: dict[str, Any], data_json: str, bokeh_js: str, version: str, written_at: str) -> str:
    """The whole page; `data_json` is `data` as JSON with no `</script>` in it."""
    s = data["summary"]
    return "\n".join(
        [
            '<!DOCTYPE html><html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{_e(s['name'])} · {_e(s['status'])} · parallel-steps report</title>",
            f"<style>\n{_asset('page.css')}</style>",
            f"<script>{bokeh_js}</script>",
            "</head>",
            "<body>",
            "<main>",
            *_heading(data),
            *_OVER_TIME,
            *_worker_time(data["worker_time"]),
            *_durations(data["durations"]),
            *_slowest(data["slowest"]),
            *_errors(data["errors"], s["run_dir"]),
            *_configuration(data["config"], s, version, written_at),
            "</main>",
            "",
            f'<script type="application/json" id="report-data">{data_json}</script>',
            f"<script>\n{_asset('page.js')}</script>",
            "</body>",
            "</html>",
        ]
    )


def seconds(value: float | None) -> str:
    """A duration as people read it: 0.35 s, 42.0 s, 3 min 5 s, 2 h 10 min."""
    if value is None:
        return "–"
    if value < 10:
        return f"{value:.3g} s"
    if value < 120:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _e(value: Any) -> str:
    return html.escape(str(value))


@functools.cache
def _asset(name: str) -> str:
    return (Path(__file__).parent / name).read_text(encoding="utf-8")


def _heading(data: dict[str, Any]) -> list[str]:
    """Name, status and reason, the key figures and the notes."""
    s = data["summary"]
    reused = ' <span class="muted">(the whole step was reused)</span>' if s["reused"] else ""
    figures = [
        (s["mini_batches_succeeded"], f"mini-batches succeeded of {_e(s['mini_batches_total'])}"),
        (s["mini_batches_failed"], "mini-batches failed"),
        (s["mini_batches_reused"], "mini-batches reused"),
        (s["attempts_retried"], "attempts retried"),
        (s["items_succeeded"], f"items succeeded ({_e(s['items_failed'])} failed)"),
        (seconds(s["elapsed_s"]), f"elapsed ({_e(s['started_at'])} to {_e(s['ended_at'] or 'now')})"),
        (rate(s["mini_batches_per_s"]), f"mini-batches per second ({_e(rate(s['items_per_s']))} items/s)"),
        (s["workers_started"], f"workers started ({len(data['timeline']['workers'])} on the timeline)"),
    ]
    notes = "".join(f"<li>{_e(note)}</li>" for note in data["notes"])
    return [
        f'  <h1>{_e(s["name"])} <span class="muted">· run {_e(s["run_id"])}</span></h1>',
        f'  <div><span class="status {_e(s["status"])}">{_e(s["status"])}</span>{reused}</div>',
        f'  <p class="reason" id="status-reason">{_e(s["status_reason"])}</p>',
        "",
        '  <div class="figures" id="key-figures">',
        *(f"    <div><b>{_e(value)}</b><span>{label}</span></div>" for value, label in figures),
        "  </div>",
        *([f'  <ul class="notes" id="notes">{notes}</ul>'] if notes else []),
        "",
    ]


_OVER_TIME = [
    "  <h2>Over time</h2>",
    '  <p class="muted">One row per worker process, one bar per attempt, coloured by outcome; grey: the worker starting (its',
    "    init()), ▲ ready to work, ✕ ◆ ■ ✱ lost (crashed; timed out, with its stacks dumped; out of memory; init() failed).",
    "    Dashed red lines: restarts and the job stopping. Drag to pan, pick the wheel or box zoom in the toolbar to zoom: the",
    "    charts below follow. Times are seconds since the driver started.</p>",
    '  <div class="chart" id="over-time"></div>',
    "",
]


def _worker_time(times: dict[str, Any] | None) -> list[str]:
    """Each worker's time since it was ready: in run(), waiting for its input, idle (driver/worker_time.py)."""
    if not times or not times["workers"]:
        return []
    rows = [(worker, t["alive_s"], t["run_s"], t["input_s"], t["idle_s"]) for worker, t in times["workers"].items()]
    total = ("all workers", *(sum(row[i] for row in rows) for i in range(1, 5)))
    return [
        "  <h2>Where the workers' time went</h2>",
        '  <p class="muted">From each worker being ready (its init() done) to its end: in run() (and writing what it',
        "    returned), waiting for its input (read while the previous mini-batch ran, or read when it started), idle",
        "    (nothing to run, or waiting for the driver).</p>",
        '  <table id="worker-time">',
        '    <tr><th>worker</th><th class="num">ready for</th><th class="num">run()</th>'
        '<th class="num">waiting for input</th><th class="num">idle</th><th>shares</th></tr>',
        *(_worker_time_row(*row) for row in [*rows, total]),
        "  </table>",
        "",
    ]


def _worker_time_row(worker: str, alive: float, run: float, waiting: float, idle: float) -> str:
    shares = [value / alive if alive else 0.0 for value in (run, waiting, idle)]
    bar = "".join(
        f'<span class="{kind}" style="width:{share:.1%}"></span>'
        for kind, share in zip(("run", "input", "idle"), shares)
    )
    cells = "".join(f'<td class="num">{_e(seconds(v))} ({s:.0%})</td>' for v, s in zip((run, waiting, idle), shares))
    return f'    <tr><td><code>{_e(worker)}</code></td><td class="num">{_e(seconds(alive))}</td>{cells}<td class="shares">{bar}</td></tr>'


def _durations(durations: dict[str, Any] | None) -> list[str]:
    if not durations:
        return ["  <h2>Mini-batch durations</h2>", '  <p class="muted">No mini-batch ran in this run.</p>', ""]
    p50, p90, p99, top, mean = (_e(seconds(durations[key])) for key in ("p50", "p90", "p99", "max", "mean"))
    return [
        "  <h2>Mini-batch durations</h2>",
        f'  <p class="muted">Every attempt: median {p50}, p90 {p90},',
        f"    p99 {p99}, max {top}, mean {mean}.</p>",
        '  <div class="chart" id="durations"></div>',
        "",
    ]


def _slowest(slowest: list[dict[str, Any]]) -> list[str]:
    return [
        f"  <h2>The {len(slowest)} slowest mini-batches</h2>",
        '  <table id="slowest">',
        '    <tr><th class="num">mini-batch</th><th class="num">attempt</th><th>outcome</th><th class="num">duration</th>'
        '<th class="num">started at</th><th>worker</th><th class="num">items</th><th>inputs</th></tr>',
        *(_slowest_row(row) for row in slowest),
        "  </table>",
        "",
    ]


def _slowest_row(row: dict[str, Any]) -> str:
    items = "?" if row["items"] is None else row["items"]
    return (
        f'    <tr><td class="num">{_e(row["mini_batch"])}</td><td class="num">{_e(row["attempt"])}</td>'
        f'<td>{_e(row["outcome"])}</td><td class="num">{_e(seconds(row["duration_s"]))}</td>\n'
        f'      <td class="num">{_e(seconds(row["start_s"]))}</td><td><code>{_e(row["worker"])}</code></td>'
        f'<td class="num">{_e(items)}</td><td class="source"><code>{_e(row["source"])}</code></td></tr>'
    )


def _errors(groups: list[dict[str, Any]], run_dir: str) -> list[str]:
    sections = [line for i, group in enumerate(groups) for line in _error_group(group, run_dir, open_=i == 0)]
    return [
        f"  <h2>Errors ({len(groups)} distinct)</h2>",
        '  <div id="errors">',
        *(sections or ['    <p class="muted">No errors.</p>']),
        "  </div>",
        "",
    ]


def _error_group(group: dict[str, Any], run_dir: str, open_: bool) -> list[str]:
    """One distinct error: how often, where first, the mini-batches it hit, its first traceback."""
    count, outcomes, listed, first = group["count"], group["outcomes"], group["mini_batches"], group["first"]
    said = f"{_e(count)} failed attempt{'s' if count != 1 else ''}"
    if len(outcomes) > 1 or "failed" not in outcomes:
        said += " (" + ", ".join(f"{_e(n)} {_e(outcome.replace('_', ' '))}" for outcome, n in outcomes.items()) + ")"
    said += _mini_batches_hit(group["mini_batches_count"], group["mini_batches_failed"])
    if first["mini_batch"] is None:
        where = "init()"
    else:
        where = f"mini-batch {_e(first['mini_batch'])} attempt {_e(first['attempt'])}"
    lines = [
        '    <section class="error-group">',
        f"      <h3>{_e(group['error'])}</h3>",
        f"      <div>{said}.",
        f"        First: {where} on <code>{_e(first['worker'])}</code> at {_e(seconds(first['t']))}.",
        f"        Log: <code>{_e(run_dir)}/{_e(group['log'])}</code></div>",
        f'      <div class="muted">Grouped as <code>{_e(group["signature"])}</code> (numbers, strings and paths masked).</div>',
    ]
    if listed:
        more = group["mini_batches_count"] - len(listed)
        tail = f" and {_e(more)} more" if more > 0 else ""
        lines.append(f'      <div class="muted">Mini-batches: {_e(", ".join(map(str, listed)))}{tail}</div>')
    if group["traceback"]:
        lines.append(
            f"      <details{' open' if open_ else ''}><summary>First traceback</summary>"
            f"<pre>{_e(group['traceback'])}</pre></details>"
        )
    return [*lines, "    </section>"]


def _mini_batches_hit(hit: int, failed: int) -> str:
    """` in 3 mini-batches: 1 failed for good, the others retried` (nothing for init() failures)."""
    if not hit:
        return ""
    if not failed:
        fate = "retried"
    elif failed == hit:
        fate = "failed for good"
    else:
        fate = f"{_e(failed)} failed for good, the others retried"
    return f" in {_e(hit)} mini-batch{'es' if hit != 1 else ''}: {fate}"


def _configuration(config: dict[str, Any], s: dict[str, Any], version: str, written_at: str) -> list[str]:
    output = f"; output <code>{_e(s['output_file'])}</code>" if s["output_file"] else ""
    return [
        "  <h2>Configuration</h2>",
        '  <table id="config">',
        *(
            f"    <tr><th><code>{_e(key)}</code></th><td><code>{_json_text(value)}</code></td></tr>"
            for key, value in config.items()
        ),
        "  </table>",
        f'  <p class="muted">Run folder <code>{_e(s["run_dir"])}</code>{output}; job result <code>{_e(s["job_result"])}</code>.',
        f"    Environment variable values are hidden. Written by parallel-steps {_e(version)} at {_e(written_at)}.</p>",
    ]


def _json_text(value: Any) -> str:
    """A config value as JSON text: keys sorted, and the characters HTML gives a meaning written as JSON
    escapes (as Jinja's `tojson` wrote it when the page was a template)."""
    text = json.dumps(value, sort_keys=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("'", "\\u0027")
