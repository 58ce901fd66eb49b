"""The end of a step over many partitions (`partitions`, inputs/step_partitions.py): what each partition
did, and which partitions failed (run/delivery.py writes each one's output in a folder of its own).

Each partition's mini-batches are one run of indexes of the plan, so its counts are the ledger's over
that run, and its output is assembled from its own slices into `<output>/<key>/`, as a step's output is.
A partition succeeds when every mini-batch of it succeeded and its counts are within the step's
thresholds; only then is its output written, so a failed partition leaves nothing partial where its
output goes (an earlier run's whole output of it stays). The thresholds still judge the whole step while it
runs: one a partition breaks stops every partition, so a step meant to let a bad partition fail alone keeps
the default (-1) thresholds.
"""

from __future__ import annotations

from typing import Any

from ..config.model import ParallelRunConfig
from ..driver import threshold_breach
from ..errors import error_line
from ..store.rundir import RunDirectory
from ..summary import Counters, RunStatus

Span = tuple[str, int, int]  # key, first mini-batch index, end index


def partition_results(run: RunDirectory, config: ParallelRunConfig, spans: list[Span]) -> dict[str, dict[str, Any]]:
    """Each partition's status, reason and counts, read from the ledger."""
    no_result_fails = config.error_threshold != -1
    results = {}
    for key, first, end in spans:
        counts = run.ledger.span_counts(first, end, no_result_fails)
        done = counts["mini_batches_succeeded"] + counts["mini_batches_failed"]
        if counts["mini_batches_failed"]:
            reason = f"{counts['mini_batches_failed']} of {counts['mini_batches_total']} mini-batches failed: "
            reason += error_line(run.ledger.first_error(first, end) or "unknown error")
        elif done < counts["mini_batches_total"]:
            reason = f"{counts['mini_batches_total'] - done} mini-batches did not run"
        else:
            reason = threshold_breach(config.thresholds(), Counters.of(counts, no_result_fails)) or ""
        status = RunStatus.FAILED if reason else RunStatus.SUCCEEDED
        results[key] = dict(status=status.value, status_reason=reason or "succeeded", **counts, output_file=None)
    return results


def partition_facts(results: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """The summary's keys of a step over partitions (none for another step): each partition's outcome and
    counts, and the keys of those that failed."""
    if results is None:
        return {}
    return dict(partitions=results, partitions_failed=failed_partitions(results))


def failed_partitions(results: dict[str, dict[str, Any]]) -> list[str]:
    return [key for key, result in results.items() if result["status"] != RunStatus.SUCCEEDED]


def failure_reason(results: dict[str, dict[str, Any]], failed: list[str]) -> str:
    """One line: how many partitions failed, the first few with their reason; the others' outputs stand."""
    shown = "; ".join(f"{key}: {results[key]['status_reason']}" for key in failed[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    others = len(results) - len(failed)
    written = f"the outputs of the {others} others are written" if others else "no output is written"
    return f"{len(failed)} of {len(results)} partitions failed ({shown}{more}); {written}"
