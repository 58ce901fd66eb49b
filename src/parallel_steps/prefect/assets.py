"""Prefect assets of a `parallel_run` task run: once the step succeeded, its output folder (or URL) becomes an
asset this task run materialized and its inputs the assets it read, with the run's facts (run id, rows
written, mini-batches run, reused and failed, the output file) as the materialization's metadata.

Prefect emits the events when the task run completes (`prefect.asset.materialization.succeeded`, and
`prefect.asset.referenced` for the inputs); a step that fails declares nothing, so no event is emitted.
A reused run (the step's own reuse) completes, so it materializes too, `reused` in its metadata; a task run
that Prefect's cache answers does not run at all, and Prefect emits nothing for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from prefect.assets import Asset
from prefect.context import AssetContext
from pydantic import ValidationError

from ..config import ParallelRunConfig
from ..report.lineage import input_locations, locate, run_facts

MATERIALIZED_BY = "parallel-steps"


def record_materialization(
    config: ParallelRunConfig, summary: Mapping[str, Any], logger: logging.LoggerAdapter[Any] | logging.Logger
) -> None:
    """Declare the succeeded step's output (and inputs) on this task run's asset context."""
    context = AssetContext.get()
    output = summary.get("output")
    if context is None or not output:
        return
    try:
        asset = Asset(key=locate(output).uri)
        inputs = {Asset(key=location.uri) for location in input_locations(config)}
    except ValidationError as exc:  # a path Prefect does not take as a key (spaces, %, ...): no asset
        logger.warning("step %s: its data is not recorded as Prefect assets: %s", config.name, exc.errors()[0]["msg"])
        return
    context.downstream_assets.add(asset)
    context.direct_asset_dependencies.update(inputs)
    context.materialized_by = MATERIALIZED_BY
    context.materialization_metadata[asset.key] = run_facts(summary)
    context.update_tracked_assets()
