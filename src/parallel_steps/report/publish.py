"""The report beside an uploaded output: `report.html` next to the output file, so that the page outlives
the run folder on the machine that ran the step (an ephemeral worker's disk, a Ray node)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..inputs.storage import upload

REPORT_NAME = "report.html"
_log = logging.getLogger(__name__)


def upload_report(report: str | None, output_url: str, output_file_name: str, log: logging.Logger = _log) -> str | None:
    """Upload the run's report page to `<output_url>/report.html`; its URL, or None when there is no page,
    the output file has that name, or the upload failed (logged: the report never fails a run)."""
    if not report:
        return None
    if output_file_name == REPORT_NAME:
        log.warning("the report is not uploaded beside the output: the output file is called %s too", REPORT_NAME)
        return None
    url = f"{output_url.rstrip('/')}/{REPORT_NAME}"
    try:
        upload(Path(report), url)
    except Exception as exc:
        log.warning("the report could not be uploaded to %s: %s: %s", url, type(exc).__name__, exc)
        return None
    log.info("report uploaded to %s", url)
    return url
