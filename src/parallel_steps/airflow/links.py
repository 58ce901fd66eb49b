"""The "Run report" extra link: a button on each parallel step's task instance that opens its run report,
served by the api-server (`plugin.py`, under /parallel-steps).

Airflow 3 computes an extra link in the worker when the task ends and keeps it in XCom; the link names
only the task instance (DAG, run, task, map index), never a path: the api-server finds the report itself.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.configuration import conf

URL_PREFIX = "/parallel-steps"


def report_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The report page's path on the api-server, below its base URL."""
    parts = "/".join(urllib.parse.quote(part, safe="") for part in (dag_id, run_id, task_id))
    return f"{URL_PREFIX}/reports/{parts}" + (f"?map_index={map_index}" if map_index >= 0 else "")


class RunReportLink(BaseOperatorLink):
    """Opens the task instance's run report (logs/report.html) through the api-server."""

    name = "Run report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return base + report_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index)
