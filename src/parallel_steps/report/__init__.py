"""The run report: a self-contained HTML page per run (timeline per worker, throughput, durations,
slowest mini-batches, error groups, resources), a Chrome trace, and short texts for the engines.

`records` reads what the run recorded and `data` reduces it to the page's data; `render` turns that into
the page (`page`), the trace and the texts; `publish` uploads the page beside an output that went to a URL.
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
