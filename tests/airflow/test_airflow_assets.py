"""Data-aware scheduling and the run report, in the suite's running Airflow (deployment.py), with the example
DAGs of dags/parallel_run_assets.py: `parallel_run_word_counts`' parallel step declares its output folder as
an outlet Asset; `parallel_run_word_totals`, scheduled on that Asset, runs once the first succeeded and reads
the run's facts from the asset event. The step's "Run report" extra link opens its report through the
provider's plugin on the api-server: for a reader of the DAG, not for a reader of another team's DAGs,
never for a path, and in a browser the charts draw.

Both DAGs live in team_a's bundle: `author_a` triggers, `reader_a` may read them, `reader_b` (team_b) not.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deployment import Deployment, deployed, wait_for, wait_for_dags

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "parallel_run_assets.py"
PRODUCER, CONSUMER, TASK = "parallel_run_word_counts", "parallel_run_word_totals", "count_words"
DOCUMENTS = 40  # what the example's make_documents writes
AUTHOR, READER, OTHER_READER = "author_a", "reader_a", "reader_b"


@deployed
def _link_the_example(home: Path) -> None:
    """The example file, linked into team_a's bundle (it finds its entry scripts beside the link's target)."""
    (home / "bundles" / "team-a" / EXAMPLE.name).symlink_to(EXAMPLE)


@pytest.fixture(scope="module")
def produced(airflow_deployment) -> dict[str, Any]:
    """The producer run once, to its end: {"run_id": its DAG run, "summary": the step's summary}."""
    airflow = airflow_deployment
    wait_for_dags(airflow, AUTHOR, PRODUCER, CONSUMER)
    run_id = airflow.trigger(AUTHOR, PRODUCER)
    assert airflow.finished(AUTHOR, PRODUCER, run_id) == "success", airflow.components.logs()
    response = airflow.xcom(AUTHOR, PRODUCER, run_id, TASK)
    assert response.status_code == 200, response.text
    return {"run_id": run_id, "summary": response.json()["value"]}


@pytest.fixture
def excused_process(airflow_deployment):
    """Airflow's own processes outlive each test; the session fixture stops them and checks for leftovers."""
    return lambda process, before: process.name().startswith("airflow")


def test_a_dag_scheduled_on_the_step_output_runs_after_it_and_reads_the_runs_facts(airflow_deployment, produced):
    airflow, summary = airflow_deployment, produced["summary"]
    assert (summary["status"], summary["rows_written"]) == ("Succeeded", DOCUMENTS)

    def consumer_run() -> str | None:
        response = airflow.client(AUTHOR).get(f"/api/v2/dags/{CONSUMER}/dagRuns")
        assert response.status_code == 200, response.text
        runs = response.json()["dag_runs"]
        return runs[0]["dag_run_id"] if runs else None

    run_id = wait_for(f"a run of {CONSUMER}", consumer_run, airflow.components)
    assert airflow.finished(AUTHOR, CONSUMER, run_id) == "success", airflow.components.logs()
    total = airflow.xcom(AUTHOR, CONSUMER, run_id, "total")
    assert total.status_code == 200, total.text
    words = sum(range(1, DOCUMENTS + 1))
    assert total.json()["value"] == {"run_id": summary["run_id"], "documents": DOCUMENTS, "words": words}

    events = airflow.client(AUTHOR).get("/api/v2/assets/events", params={"source_dag_id": PRODUCER})
    assert events.status_code == 200, events.text
    (event,) = events.json()["asset_events"]
    assert (event["uri"], event["source_run_id"]) == (Path(summary["output"]).as_uri(), produced["run_id"])
    assert event["extra"] == {
        "run_id": summary["run_id"],
        "status": "Succeeded",
        "reused": False,
        "rows_written": DOCUMENTS,
        "mini_batches_run": 4,
        "mini_batches_reused": 0,
        "mini_batches_failed": 0,
        "items_succeeded": DOCUMENTS,
        "items_failed": 0,
        "output_file": Path(summary["output_file"]).as_uri(),
        "report": summary["report"],
    }


def report_link(airflow: Deployment, run_id: str, user: str = READER) -> str:
    response = airflow.client(user).get(f"/api/v2/dags/{PRODUCER}/dagRuns/{run_id}/taskInstances/{TASK}/links")
    assert response.status_code == 200, response.text
    return response.json()["extra_links"]["Run report"]


def test_the_run_report_link_opens_the_report_for_readers_of_the_dag_only(airflow_deployment, produced):
    airflow = airflow_deployment
    link = report_link(airflow, produced["run_id"])
    quoted = urllib.parse.quote(produced["run_id"], safe="")
    assert link == f"{airflow.url}/parallel-steps/reports/{PRODUCER}/{quoted}/{TASK}"

    page = airflow.client(READER).get(link)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert page.content == Path(produced["summary"]["report"]).read_bytes()
    assert "<title>count-words · Succeeded · parallel-steps report</title>" in page.text

    assert airflow.client(OTHER_READER).get(link).status_code == 403  # a reader of team_b's DAGs only
    assert httpx.get(link).status_code == 401  # nobody logged in


@pytest.mark.parametrize(
    "path",
    [
        "/parallel-steps/reports/{dag}/{run}/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        "/parallel-steps/reports/{dag}/{run}/%2E%2E",
        "/parallel-steps/reports/{dag}/..%2F{dag}/{task}",
    ],
)
def test_a_path_in_the_report_request_is_not_found(airflow_deployment, produced, path):
    airflow = airflow_deployment
    url = path.format(dag=PRODUCER, run=urllib.parse.quote(produced["run_id"], safe=""), task=TASK)
    response = airflow.client(READER).get(url)
    assert response.status_code == 404, response.text
    assert "root:" not in response.text


def test_a_summary_rewritten_to_point_elsewhere_is_not_served(airflow_deployment, produced):
    """Who may edit the DAG may rewrite its XComs through the API; the report is still only a run's page under
    the run root."""
    airflow, run_id = airflow_deployment, produced["run_id"]
    run_dir = Path(produced["summary"]["run_dir"])
    entry = f"/api/v2/dags/{PRODUCER}/dagRuns/{run_id}/taskInstances/{TASK}/xcomEntries/return_value"
    original = produced["summary"]
    try:
        for elsewhere in ("/etc/passwd", str(run_dir / "run.json"), f"{airflow.runs}/../passwords.json"):
            patched = airflow.client(AUTHOR).patch(entry, json={"value": {**original, "report": elsewhere}})
            assert patched.status_code == 200, patched.text
            assert airflow.client(READER).get(report_link(airflow, run_id)).status_code == 404, elsewhere
    finally:
        restored = airflow.client(AUTHOR).patch(entry, json={"value": original})
        assert restored.status_code == 200, restored.text


# In a browser ------------------------------------------------------------------------------------------


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_chromium_opens_the_report_link_and_the_charts_render(airflow_deployment, produced, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing; scripts/test-all installs it (apt-get install chromium)")
        pytest.skip("no chromium on this machine (scripts/test-all installs it)")
    airflow = airflow_deployment
    link = report_link(airflow, produced["run_id"])
    with chromium(tmp_path / "profile") as browser:
        rendered, problems = browser.open(link, cookie=("_token", airflow.token(READER)), origin=airflow.url)
    assert problems == []
    assert rendered == "2", "the charts were not drawn"


class _DevTools:
    """A headless Chromium driven through its DevTools protocol: a page opened with a cookie set (the
    api-server's login cookie, as after logging in), then read until its charts have drawn."""

    def __init__(self, socket: Any):
        self.socket, self.next_id, self.events = socket, 0, []

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        self.socket.send(json.dumps(message | ({"sessionId": session} if session else {})))
        while True:
            answer = json.loads(self.socket.recv(timeout=60))
            if answer.get("id") == self.next_id:
                assert "error" not in answer, answer
                return answer.get("result", {})
            self.events.append(answer)

    def open(self, url: str, cookie: tuple[str, str], origin: str) -> tuple[str | None, list[str]]:
        """(document.body.dataset.rendered once it is set, the page's console errors and exceptions)."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Runtime.enable", session)
        self.call("Network.setCookie", session, name=cookie[0], value=cookie[1], url=origin)
        self.call("Page.navigate", session, url=url)
        rendered, deadline = None, time.monotonic() + 60
        while rendered is None and time.monotonic() < deadline:
            time.sleep(0.2)
            result = self.call(
                "Runtime.evaluate", session, expression="document.body && document.body.dataset.rendered || null"
            )
            rendered = result["result"].get("value")
        problems = [
            json.dumps(event["params"])[:500]
            for event in self.events
            if event.get("method") == "Runtime.exceptionThrown"
            or (event.get("method") == "Runtime.consoleAPICalled" and event["params"]["type"] in ("error", "warning"))
        ]
        return rendered, problems


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[_DevTools]:
    from websockets.sync.client import connect

    browser = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(profile)},
    )
    try:
        endpoint = None
        while endpoint is None and browser.poll() is None:
            match = re.search(r"DevTools listening on (ws://\S+)", browser.stderr.readline())
            endpoint = match.group(1) if match else None
        assert endpoint, "Chromium did not start its DevTools endpoint"
        with connect(endpoint, max_size=None) as socket:
            yield _DevTools(socket)
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=30)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
        browser.stderr.close()
