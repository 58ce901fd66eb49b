"""Prefect assets of a `parallel_run` task run: once the step succeeded, its output folder (or URL) becomes an
asset this task run materialized and its inputs the assets it read, with the run's facts (run id, rows
written, mini-batches run, reused and failed, the output file) as the materialization's metadata.

Prefect emits the events when the task run completes (`prefect.asset.materialization.succeeded`, and
`prefect.asset.referenced` for the inputs); a step that fails declares nothing, so no event is emitted.
A reused run (the step's own reuse) completes, so it materializes too, `reused` in its metadata; a task run
that Prefect's cache answers does not run at all, and Prefect emits nothing for it.

A step over partitions (`partitions`) materializes each partition that succeeded instead, as an asset of its
own: Prefect 3.9's assets have no partitions, so the key is the partition's output folder (`<output>/<key>`)
and its metadata that partition's facts. These events are emitted by the task itself, before it returns or
fails, each through an `AssetContext` of one partition (Prefect's own `emit_events`, so the event's name,
resource, related assets and the task and flow run it came from are what Prefect's materializations carry):
the task run's own context would emit only when the task completes, for every asset at once, with every
partition's inputs related to each. So a step whose partitions partly failed still records those that
succeeded, and then fails its task run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from prefect.assets import Asset
from prefect.context import AssetContext
from prefect.states import Completed
from pydantic import ValidationError

from ..config import ParallelRunConfig
from ..inputs.step_partitions import expand
from ..masking import mask_urls
from ..report.lineage import DataLocation, input_locations, locate, run_facts
from ..summary import RunStatus

MATERIALIZED_BY = "parallel-steps"
Logger = logging.LoggerAdapter[Any] | logging.Logger


def record_materialization(config: ParallelRunConfig, summary: Mapping[str, Any], logger: Logger) -> None:
    """Declare the succeeded step's output (and inputs) on this task run's asset context; a step over
    partitions emits each partition's materialization now (`record_partitions`)."""
    context = AssetContext.get()
    output = summary.get("output")
    if context is None or not output:
        return
    if summary.get("partitions") is not None:
        record_partitions(config, summary, logger)
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


def record_partitions(config: ParallelRunConfig, summary: Mapping[str, Any], logger: Logger) -> None:
    """Emit a materialization for each partition of the step that succeeded (its output is written, whether
    the step succeeded or not), its inputs the assets it read. Nothing for a step without partitions, or
    outside a task run."""
    partitions: Mapping[str, Mapping[str, Any]] = summary.get("partitions") or {}
    output = summary.get("output")
    if AssetContext.get() is None or not output:
        return
    refused: list[str] = []
    for key, result in partitions.items():
        if result.get("status") != RunStatus.SUCCEEDED:
            continue
        try:
            asset = Asset(key=partition_asset_key(output, key))
            inputs = {Asset(key=location.uri) for location in partition_inputs(config, key)}
        except ValidationError as exc:  # e.g. a key with ':' (its URI has %3A), which Prefect refuses
            refused.append(f"{key} ({exc.errors()[0]['msg']})")
            continue
        context = AssetContext(
            downstream_assets={asset},
            direct_asset_dependencies=inputs,
            materialized_by=MATERIALIZED_BY,
            materialization_metadata={asset.key: partition_facts(summary, key, result)},
        )
        context.emit_events(Completed())
    if refused:
        logger.warning(
            "step %s: %d partitions are not recorded as Prefect assets: %s",
            config.name,
            len(refused),
            "; ".join(refused[:3]) + (" ..." if len(refused) > 3 else ""),
        )


def partition_asset_key(output: str, key: str) -> str:
    """The asset key of a partition: the URI of its output folder, `<output>/<key>`, as `locate` names it."""
    path, mark, query = output.partition("?")  # a URL's query (masked) stays after the path
    return locate(f"{path.rstrip('/')}/{key}{mark}{query}").uri


def partition_inputs(config: ParallelRunConfig, key: str) -> list[DataLocation]:
    """Where one partition's data is: the input paths with `{partition}` filled by `key`."""
    return input_locations(config.model_copy(update={"inputs": expand(config.inputs, [key])}))


def partition_facts(summary: Mapping[str, Any], key: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """A partition's materialization metadata: its key, the run's id and report, and what the partition did
    (status, mini-batches, items, rows written, its output file's URI)."""
    output_file = result.get("output_file")
    return {
        "partition": key,
        "run_id": summary.get("run_id"),
        **{fact: value for fact, value in result.items() if fact != "output_file"},
        "output_file": locate(mask_urls(output_file)).uri if output_file else None,
        "report": summary.get("report_url") or summary.get("report"),
    }
