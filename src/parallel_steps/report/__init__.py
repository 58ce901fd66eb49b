"""The run report: a self-contained HTML page per run (timeline per worker, throughput, durations,
slowest mini-batches, error groups, resources), a Chrome trace, and short texts for the engines.

`data` reads what the run recorded; `render` turns it into the page (report.html.j2), the trace
and the texts; `publish` uploads the page beside an output that went to a URL.
"""

from .publish import served_report, upload_report
from .records import mask_config
from .render import default_path, key_figures, report_markdown, write_report, write_run_report, write_trace

__all__ = [
    "default_path",
    "key_figures",
    "mask_config",
    "report_markdown",
    "served_report",
    "upload_report",
    "write_report",
    "write_run_report",
    "write_trace",
]
