"""The run report (logs/report.html) and its trace: what a user opens after a run.

The page's embedded data is checked against the ledger (the run's own record of every mini-batch
and failed attempt), for a run like the main job and for one with failures, a hang and a SIGKILLed
worker; a headless Chromium opens both pages offline, with no console message, and screenshots them.
"""

import collections
import html.parser
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from parallel_steps import ParallelRunConfig, StepFailed
from parallel_steps.driver.faults import signature
from parallel_steps.report import key_figures, mask_config, write_report
from parallel_steps.report.data import page_data as report_data
from parallel_steps.report.records import RunRecords
from parallel_steps.run.step import run_step
from parallel_steps.store.attempts import Attempts
from parallel_steps.store.ledger import Ledger
from parallel_steps.store.logs import RunLogs

from .conftest import cli, cli_json

REPO = Path(__file__).resolve().parents[2]
OUTCOME_COLORS = {"succeeded": (45, 164, 78), "failed": (207, 34, 46), "timed_out": (251, 133, 0)}

FAULTY = """
import os, signal, time
from pathlib import Path


def run(mini_batch):
    for path in mini_batch:
        n = int(Path(path).read_text())
        time.sleep(0.02)
        if n == 7 and not Path("killed").exists():
            Path("killed").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if n == 13 and not Path("hung").exists():
            Path("hung").touch()
            time.sleep(600)
        if n in (17, 34):
            raise ValueError(f"bad value {n} in {path}")
    return mini_batch
"""


def config(**fields) -> ParallelRunConfig:
    return ParallelRunConfig(**{"entry_script": "score.py", "inputs": ["data"], "process_count_per_node": 1, **fields})


def page_data(html: str) -> dict:
    """The data the page embeds (and draws from)."""
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert found, "no embedded report data"
    return json.loads(found.group(1))


class _References(html.parser.HTMLParser):
    """Every src= and href= of the page's tags (script contents are raw text to the parser)."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [value for name, value in attrs if name in ("src", "href") and value]


def references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.found


def _rows(run_dir: Path) -> list[dict]:
    found = Ledger.open_readonly(Path(run_dir) / "ledger.sqlite")
    try:
        return found.rows()
    finally:
        found.close()


def _succeeded(run_dir: Path) -> set[int]:
    return {row["idx"] for row in _rows(run_dir) if row["state"] == "succeeded"}


def ledger(run_dir: Path) -> dict:
    """What the ledger says ran: attempts per worker, failed attempts by error, counts."""
    rows = _rows(run_dir)
    ran = [(row["worker"],) for row in rows if row["state"] == "succeeded" and row["reused_from"] is None]
    db = sqlite3.connect(Path(run_dir) / "ledger.sqlite")
    try:
        failed = db.execute("SELECT idx, worker, outcome, error FROM attempts").fetchall()
    finally:
        db.close()
    states = dict(collections.Counter(row["state"] for row in rows))
    reused = sum(1 for row in rows if row["reused_from"] is not None)
    not_reused = {row["idx"] for row in rows if row["reused_from"] is None}
    per_worker = collections.Counter(w for (w,) in ran) + collections.Counter(w for _, w, _, _ in failed)
    errors = collections.defaultdict(set)
    for idx, _, _, error in failed:
        errors[signature(error)].add(idx)
    return dict(
        per_worker=per_worker,
        errors=errors,
        error_counts=collections.Counter(signature(e) for *_, e in failed),
        outcomes=collections.Counter(o for _, _, o, _ in failed),
        succeeded=states.get("succeeded", 0),
        failed=states.get("failed", 0),
        reused=reused,
        not_reused=not_reused,
    )


def bars_per_worker(data: dict) -> collections.Counter:
    bars = data["timeline"]["bars"]
    return collections.Counter(w for w, n in zip(bars["worker"], bars["count"]) for _ in range(n))


# The runs the checks read (each made once per module) -------------------------------------------


@pytest.fixture(scope="module")
def main_job(tmp_path_factory) -> dict:
    """The main job (examples/digits: PNG files, a model side input, two workers) in its own folder."""
    folder = tmp_path_factory.mktemp("digits")
    for name in ("prepare.py", "score.py", "step.yaml"):
        shutil.copy(REPO / "examples" / "digits" / name, folder / name)
    subprocess.run([sys.executable, str(folder / "prepare.py")], check=True, capture_output=True)
    code, summary = cli_json("run", folder / "step.yaml", cwd=folder, env={"PARALLEL_STEPS_HOME": str(folder / "runs")})
    assert code == 0, summary
    return summary


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> dict:
    """A run whose script fails two mini-batches for good (after a retry each), hangs once and is
    SIGKILLed once (both retried), with a secret in its environment variables."""
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "data").mkdir()
    for i in range(40):
        (folder / "data" / f"f{i:04d}.txt").write_text(f"{i}\n")
    (folder / "score.py").write_text(FAULTY)
    code, summary = cli_json(
        "run",
        "--entry-script",
        "score.py",
        "--input",
        "data",
        "--mini-batch-size",
        "2",
        "--process-count-per-node",
        "3",
        "--run-invocation-timeout",
        "3",
        "--run-max-try",
        "2",
        "--resource-monitor-interval",
        "1",
        "--set",
        'environment_variables={"API_TOKEN": "hunter2-secret"}',
        cwd=folder,
        env={"PARALLEL_STEPS_HOME": str(folder / "runs")},
        timeout=120,
    )
    assert code == 0, summary
    return summary


# The page's data matches the ledger --------------------------------------------------------------


def test_the_main_jobs_report_counts_every_attempt_on_its_worker(main_job):
    html = Path(main_job["report"]).read_text()
    data = page_data(html)
    truth = ledger(main_job["run_dir"])
    assert main_job["report"] == str(Path(main_job["run_dir"]) / "logs" / "report.html")
    assert data["summary"]["mini_batches_succeeded"] == truth["succeeded"] == 45
    assert data["summary"]["items_succeeded"] == main_job["items_succeeded"] == 450
    assert bars_per_worker(data) == truth["per_worker"]
    markers = data["timeline"]["markers"]
    assert {m["kind"] for m in markers} == {"started"}
    assert set(data["timeline"]["workers"]) == set(truth["per_worker"]) | {m["worker"] for m in markers}
    assert data["errors"] == []
    assert sum(data["durations"]["counts"]) == 45
    assert len(data["slowest"]) == 20
    assert all("digit_" in row["source"] for row in data["slowest"])
    assert references(html) == [], "the page loads nothing from elsewhere"


def test_a_faulty_runs_report_shows_its_failures_hang_and_lost_worker(faulty):
    summary = faulty
    html = Path(summary["report"]).read_text()
    data = page_data(html)
    truth = ledger(summary["run_dir"])
    shown = data["summary"]
    assert (shown["mini_batches_succeeded"], shown["mini_batches_failed"]) == (truth["succeeded"], truth["failed"])
    assert (shown["mini_batches_failed"], shown["attempts_retried"]) == (2, 4)
    assert bars_per_worker(data) == truth["per_worker"]
    assert collections.Counter(data["timeline"]["bars"]["outcome"]) == {
        "succeeded": truth["succeeded"],
        **truth["outcomes"],
    }
    # Three workers and a replacement for each lost one (the last may still be starting at the end).
    markers = data["timeline"]["markers"]
    kinds = collections.Counter(m["kind"] for m in markers)
    assert (kinds["crashed"], kinds["timed_out"], summary["workers_started"]) == (1, 1, 5)
    assert kinds["started"] >= 4
    assert set(data["timeline"]["workers"]) == set(truth["per_worker"]) | {m["worker"] for m in markers}
    # Error groups: the same errors, attempts and mini-batches as the ledger's failed attempts.
    assert {signature(g["error"]): g["count"] for g in data["errors"]} == truth["error_counts"]
    assert {signature(g["error"]): set(g["mini_batches"]) for g in data["errors"]} == truth["errors"]
    by_outcome = {next(iter(g["outcomes"])): g for g in data["errors"]}
    assert by_outcome["failed"]["mini_batches_failed"] == 2
    assert "ValueError: bad value" in by_outcome["failed"]["traceback"]
    assert by_outcome["failed"]["log"].startswith("logs/user/error/node0/process")
    hang = by_outcome["timed_out"]
    assert "stacks of every thread" in hang["traceback"]
    assert "score.py" in hang["traceback"]
    assert "SIGKILL" in by_outcome["crashed"]["error"]
    assert by_outcome["crashed"]["log"].endswith(".stderr.txt")  # a crash leaves no traceback
    # What a person reads: the groups, the secrets masked, the resources sampled.
    assert html.count('class="error-group"') == 3
    assert "hunter2-secret" not in html
    assert data["config"]["environment_variables"] == {"API_TOKEN": "***"}
    assert data["resources"]["nodes"]["node0"]["cpu_percent"]
    assert data["resources"]["workers"]


def test_run_ends_with_the_report_path(make_files, write_script):
    make_files(4)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    result = cli("run", "--entry-script", "score.py", "--input", "data")
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1].split()
    assert last[0] == "report:"
    assert last[1].endswith("logs/report.html")
    assert page_data(Path(last[1]).read_text())["summary"]["mini_batches_succeeded"] == 1


def test_report_false_writes_no_page(make_files, write_script):
    make_files(4)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    code, summary = cli_json("run", "--entry-script", "score.py", "--input", "data", "--report", "false")
    assert (code, summary["report"]) == (0, None)
    assert not (Path(summary["run_dir"]) / "logs" / "report.html").exists()


def test_reused_mini_batches_are_counted_and_have_no_bar(make_files, write_script, tmp_path):
    make_files(12)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    first = run_step(config(mini_batch_size=3))
    (tmp_path / "data" / "f0005.txt").write_text("changed\n")
    second = run_step(config(mini_batch_size=3))
    data = page_data(Path(second["report"]).read_text())
    truth = ledger(second["run_dir"])
    assert data["summary"]["mini_batches_reused"] == truth["reused"] == 3
    assert data["summary"]["reused_from"] == {first["run_id"]: 3}
    assert data["timeline"]["bars"]["mini_batch"] == [1]
    assert any("3 mini-batches were reused" in note for note in data["notes"])


def test_a_resumed_run_shows_only_its_own_attempts(make_files, write_script, tmp_path):
    """The run folder keeps the first invocation's rows; the report of the rerun is about the rerun."""
    make_files(8)
    write_script(
        "from pathlib import Path\n\ndef run(mini_batch):\n"
        "    if 'f0003' in mini_batch[0] and not Path('fixed').exists():\n"
        "        raise ValueError('not yet')\n    return mini_batch\n"
    )
    run_dir = tmp_path / "the-run"
    with pytest.raises(StepFailed):
        run_step(config(mini_batch_size=1, run_max_try=1, mini_batch_error_threshold=0), run_dir=run_dir)
    done_before = _succeeded(run_dir)
    (tmp_path / "fixed").touch()
    summary = run_step(config(mini_batch_size=1, run_max_try=1, mini_batch_error_threshold=0), run_dir=run_dir)
    data = page_data(Path(summary["report"]).read_text())
    assert sorted(data["timeline"]["bars"]["mini_batch"]) == sorted(set(range(8)) - done_before)
    assert 3 in data["timeline"]["bars"]["mini_batch"]
    assert data["errors"] == []


def test_past_the_bar_limit_attempts_are_merged_and_the_page_says_so(make_files, write_script, tmp_path):
    make_files(60)
    write_script("def run(mini_batch):\n    return mini_batch\n")
    summary = run_step(config(mini_batch_size=1, process_count_per_node=2))
    page = write_report(summary["run_dir"], output=tmp_path / "small.html", max_bars=10)
    data = page_data(page.read_text())
    bars = data["timeline"]["bars"]
    assert len(bars["start_ms"]) <= 10
    assert sum(bars["count"]) == 60
    assert bars_per_worker(data) == ledger(summary["run_dir"])["per_worker"]
    assert any("60 attempts, more than the 10 bars" in note for note in data["notes"])


# The command and the trace ------------------------------------------------------------------------


def test_report_command_writes_the_page_and_a_chrome_trace(faulty, tmp_path):
    summary = faulty
    result = cli("report", summary["run_dir"], "-o", tmp_path / "page.html", "--trace", tmp_path / "trace.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["report:", str(tmp_path / "page.html"), "trace:", str(tmp_path / "trace.json")]
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    rebuilt = page_data((tmp_path / "page.html").read_text())
    assert rebuilt == page_data(Path(summary["report"]).read_text()), "the run's own page, from its driver's records"
    assert sorted(tracks.values()) == rebuilt["timeline"]["workers"]
    complete = [e for e in events if e["ph"] == "X"]
    assert collections.Counter(tracks[e["pid"], e["tid"]] for e in complete) == ledger(summary["run_dir"])["per_worker"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and e["name"].startswith("mini-batch ") for e in complete)
    assert {e["args"]["reason"] for e in events if e["name"].startswith("worker replaced")} == {"crashed", "timed_out"}


def test_report_of_a_running_run_shows_it_so_far(make_files, write_script, tmp_path):
    make_files(6)
    write_script(  # 0.1 s a mini-batch: a worker holds one at a time, and reports each at once
        "import time\nfrom pathlib import Path\n\ndef run(mini_batch):\n    time.sleep(0.1)\n"
        "    while 'f0005' in mini_batch[0] and not Path('go').exists():\n        time.sleep(0.05)\n"
        "    return mini_batch\n"
    )
    args = ["--entry-script", "score.py", "--input", "data", "--mini-batch-size", "1", "--process-count-per-node", "1"]
    started = cli("run", *args, "--detach")  # one worker: the last mini-batch waits, none behind it
    run_id = started.stdout.split()[0]
    try:
        deadline = time.monotonic() + 60
        while cli_json("status", run_id)[1].get("mini_batches_succeeded", 0) < 5:  # a bound, not a speed check
            assert time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.2)
        result = cli("report", run_id, "-o", tmp_path / "now.html")
        assert result.returncode == 0, result.stderr
        data = page_data((tmp_path / "now.html").read_text())
        assert (data["summary"]["status"], data["summary"]["mini_batches_succeeded"]) == ("Running", 5)
        assert sorted(data["timeline"]["bars"]["mini_batch"]) == [0, 1, 2, 3, 4]
    finally:
        (tmp_path / "go").touch()
        assert cli("wait", run_id).returncode == 0


def test_report_command_names_a_missing_run_in_one_line(tmp_path):
    result = cli("report", tmp_path / "nowhere")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"parallel-steps: {tmp_path / 'nowhere'}: no such run")


# In a browser ------------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(page: Path, profile: Path, *action: str) -> tuple[str, list[str]]:
    """Open `page` in a headless Chromium that can reach no network; returns its stdout and the page's
    console messages (any level: the page itself logs nothing)."""
    result = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1400,2000",
            "--virtual-time-budget=10000",
            *action,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, [line for line in result.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]


@pytest.mark.parametrize("run", ["main_job", "faulty"])
def test_chromium_opens_the_page_offline_and_draws_the_timeline(run, request, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing; scripts/test-all installs it (apt-get install chromium)")
        pytest.skip("no chromium on this machine (scripts/test-all installs it)")
    summary = request.getfixturevalue(run)
    page = Path(summary["report"])
    dom, console = chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert console == [], console
    assert re.search(r'<body data-rendered="2"', dom), "the charts were not drawn"
    screenshot = tmp_path / f"{run}.png"
    _, console = chromium(page, tmp_path / "profile-shot", f"--screenshot={screenshot}")
    assert console == [], console
    colors = collections.Counter(Image.open(screenshot).convert("RGB").getdata())
    assert colors[OUTCOME_COLORS["succeeded"]], f"no succeeded bar in {screenshot}"
    if run == "faulty":  # the hung attempt's bar is seconds long: wider than any legend swatch
        assert colors[OUTCOME_COLORS["timed_out"]] > 2000, f"no timed out bar in {screenshot}"


# Parts -------------------------------------------------------------------------------------------------


def one_worker(outcomes: list[str]) -> Attempts:
    """Attempts of 10 ms each, one after another on one worker."""
    n = len(outcomes)
    return Attempts(
        mini_batch=list(range(n)),
        attempt=[1] * n,
        worker=["node0/process000"] * n,
        items=[1] * n,
        items_succeeded=[1] * n,
        outcome=outcomes,
        start=[i * 0.01 for i in range(n)],
        duration=[0.01] * n,
        error=[""] * n,
    )


def test_merged_bars_keep_outcomes_apart_even_when_they_alternate(tmp_path):
    """Every other attempt failed: no bar can merge two, so merging stops at the whole span."""
    alternating = one_worker(["failed" if i % 2 else "succeeded" for i in range(50)])
    records = RunRecords(tmp_path, RunLogs(tmp_path), {}, 0.0, alternating, [])
    bars = report_data(records, max_bars=10)["timeline"]["bars"]
    assert (len(bars["start_ms"]), bars["count"]) == (50, [1] * 50)
    calm = one_worker(["succeeded"] * 50)
    bars = report_data(RunRecords(tmp_path, RunLogs(tmp_path), {}, 0.0, calm, []), max_bars=10)["timeline"]["bars"]
    assert len(bars["start_ms"]) <= 10
    assert sum(bars["count"]) == 50


def test_the_config_shown_hides_environment_variable_values():
    shown = mask_config({"environment_variables": {"TOKEN": "s3cret", "MODE": "fast"}, "name": "x"})
    assert shown == {"environment_variables": {"TOKEN": "***", "MODE": "***"}, "name": "x"}


def test_key_figures_read_as_one_line():
    summary = dict(
        status="Succeeded",
        elapsed_s=12.5,
        mini_batches_run=40,
        mini_batches_succeeded=45,
        mini_batches_total=45,
        mini_batches_failed=0,
        mini_batches_reused=5,
        attempts_retried=1,
        items_succeeded=450,
        items_failed=0,
    )
    assert key_figures(summary) == (
        "Succeeded in 12.5 s, 3.2 mini-batches/s: 45 of 45 mini-batches succeeded, 0 failed, 5 reused, "
        "1 attempt retried; 450 items succeeded, 0 failed"
    )
