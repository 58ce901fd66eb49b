"""The report where users find it: uploaded beside an output URL (`report.html` next to the output file), so
that the page outlives the run folder on the machine that ran the step, and which pages a server may hand
out (only run reports under the run root)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..masking import mask_urls
from ..storage.objects import upload
from .render import default_path

REPORT_NAME = default_path(".").name  # report.html, under the same name as in the run folder
_log = logging.getLogger(__name__)


def upload_report(report: str | None, output_url: str, output_file_name: str, log: logging.Logger = _log) -> str | None:
    """Upload the run's report page to `<output_url>/report.html`; its URL (credentials masked: it goes to the
    summary), or None when there is no page, the output file has that name, or the upload failed (logged: the
    report never fails a run)."""
    if not report:
        return None
    if output_file_name == REPORT_NAME:
        log.warning("the report is not uploaded beside the output: the output file is called %s too", REPORT_NAME)
        return None
    url = f"{output_url.rstrip('/')}/{REPORT_NAME}"
    try:
        upload(Path(report), url)
    except Exception as exc:
        log.warning(
            "the report could not be uploaded to %s: %s", mask_urls(url), mask_urls(f"{type(exc).__name__}: {exc}")
        )
        return None
    log.info("report uploaded to %s", mask_urls(url))
    return mask_urls(url)


def served_report(report: str | None, run_root: Path) -> Path | None:
    """The report page at `report` if a server may hand it out: an existing `logs/report.html` of a run under
    `run_root` once symlinks are resolved; None for anything else (another file, a path out of the root)."""
    if not report:
        return None
    root, page = run_root.resolve(), Path(report).resolve()
    if not page.is_relative_to(root) or len(page.parents) < 2 or page != default_path(page.parents[1]):
        return None
    return page if page.is_file() else None
