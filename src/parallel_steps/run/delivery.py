"""Writing where a run's output goes once it succeeded: the output file assembled from the spools' slices
(store/output.py), or, for a step over partitions, each succeeded partition's in `<output>/<key>/`; then the
upload to an output URL. A cancel stops either between two slices or files: nothing partial is left where
the output goes, and a rerun delivers it.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import Logger
from typing import Any, NamedTuple

from ..config.model import ParallelRunConfig
from ..masking import mask_urls
from ..storage.objects import upload
from ..store.output import assemble, spool_format
from ..store.rundir import RunDirectory
from ..store.space import write_site
from ..summary import RunStatus
from .partitioned import Span, failed_partitions, failure_reason, partition_facts, partition_results
from .reuse import output_file_url


class Delivered(NamedTuple):
    """What a succeeded run wrote where its output goes: its output file, or each succeeded partition's."""

    output_file: str | None = None
    rows: int = 0
    size: int | None = None
    partitions: dict[str, dict[str, Any]] | None = None  # a step over partitions: each one's outcome

    def summary_keys(self, status: RunStatus) -> dict[str, Any]:
        """The summary's keys of the output, for a run that ended with `status`: a run that failed wrote
        nothing, unless it is a step over partitions that wrote those that succeeded."""
        written = status == RunStatus.SUCCEEDED or self.partitions is not None
        return dict(
            output_file=mask_urls(self.output_file) if status == RunStatus.SUCCEEDED and self.output_file else None,
            rows_written=self.rows if written else 0,
            output_bytes=self.size if written else None,
            **partition_facts(self.partitions),
        )


def deliver(
    run: RunDirectory,
    config: ParallelRunConfig,
    spans: list[Span],
    check: Callable[[], None],
    log: Logger,
    reason: str,
) -> tuple[Delivered, RunStatus, str]:
    """The output of a run that succeeded for `reason`, and the run's status and reason after it: a step over
    partitions writes each succeeded partition's output and fails, naming them, if some did not succeed."""
    if not spans:
        return Delivered(*_output_file(run, config, check, log)), RunStatus.SUCCEEDED, reason
    results = partition_results(run, config, spans)
    rows, size = _partition_files(run, config, spans, results, check, log)
    _output_file(run, config, check, log, assembled=True)
    delivered, failed = Delivered(None, rows, size, results), failed_partitions(results)
    if failed:
        return delivered, RunStatus.FAILED, failure_reason(results, failed)
    return delivered, RunStatus.SUCCEEDED, reason


def _output_file(
    run: RunDirectory, config: ParallelRunConfig, check: Callable[[], None], log: Logger, assembled: bool = False
) -> tuple[str | None, int, int | None]:
    """The output file (its path or URL), then the upload; `check` (a cancel) stops either between two
    slices or files: nothing partial is left where the output goes, and a rerun delivers it. Returns the
    output file, its rows and its bytes (for the summary and the engines' lineage). `assembled`: the
    output files are written (each partition's), only the upload is left."""
    check()
    output_file, rows, size = None, 0, None
    if config.output_action == "append_row" and not assembled:
        target = run.output_dir / config.append_row_file_name
        fmt = spool_format(config.output_format, config.append_row_dataframe_header)
        assemble(run.ledger.parts(), target, fmt, check=check)
        output_file = output_file_url(run.output_url, config) if run.output_url else str(target)
        rows, size = run.ledger.rows_written(), target.stat().st_size
        log.info("output assembled: %s", target)
    if run.output_url:  # the output file last: once it is there, so is everything the script wrote
        write_site("upload", mask_urls(run.output_url))
        upload(run.output_dir, run.output_url, last=config.append_row_file_name, check=check)
        log.info("output uploaded to %s", mask_urls(run.output_url))
    return output_file, rows, size


def _partition_files(
    run: RunDirectory,
    config: ParallelRunConfig,
    spans: list[Span],
    results: dict[str, dict[str, Any]],
    check: Callable[[], None],
    log: Logger,
) -> tuple[int, int]:
    """Each succeeded partition's output file in `<output>/<key>/` (uploaded with the output folder); returns
    the rows and bytes written. `check` (a cancel) stops between two slices, as for a step's one file."""
    rows = size = 0
    if config.output_action != "append_row":
        return rows, size
    fmt = spool_format(config.output_format, config.append_row_dataframe_header)
    for key, first, end in spans:
        result = results[key]
        if result["status"] != RunStatus.SUCCEEDED:
            continue
        folder = run.output_dir / key
        folder.mkdir(exist_ok=True)
        target = folder / config.append_row_file_name
        assemble(run.ledger.parts(first, end), target, fmt, check=check)
        url = f"{run.output_url.rstrip('/')}/{key}" if run.output_url else None
        result["output_file"] = output_file_url(url, config) if url else str(target)
        rows, size = rows + result["rows_written"], size + target.stat().st_size
    log.info(
        "output assembled for %d partitions in %s",
        sum(r["output_file"] is not None for r in results.values()),
        run.output_dir,
    )
    return rows, size
