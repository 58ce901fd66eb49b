"""OpenLineage facets of a parallel step, for the OpenLineage provider's listener.

`ParallelRunOperator.get_openlineage_facets_on_start/complete/failure` import this module when the
listener calls them, so the provider works without OpenLineage installed. The datasets are those of the
Assets (`report/lineage.py`: the inputs, the output folder) in OpenLineage's naming; Parquet inputs and outputs
get a schema facet, the output its statistics (rows, bytes, files), the run a `parallelSteps` facet with
the step's counts and its most frequent errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet, output_statistics_output_dataset, schema_dataset

from ..config import ParallelRunConfig
from ..report.lineage import (
    DataLocation,
    error_digest,
    input_locations,
    input_schemas,
    locate,
    output_location,
    table_schema,
)
from ..version import __version__

PRODUCER = f"https://pypi.org/project/parallel-steps/{__version__}"
_FACET_SCHEMA = "https://parallel-steps.readthedocs.io/en/latest/airflow/#openlineage"
_COUNTS = (
    "mini_batches_total",
    "mini_batches_succeeded",
    "mini_batches_failed",
    "mini_batches_reused",
    "mini_batches_run",
    "items_succeeded",
    "items_failed",
    "rows_written",
    "attempts_retried",
    "workers_started",
)


@attr.define
class ParallelStepsRunFacet(RunFacet):
    """What one run of the step did: its status and counts, and its most frequent errors."""

    run_id: str | None = attr.field(default=None)
    status: str | None = attr.field(default=None)
    reused: bool = attr.field(default=False)
    counts: dict[str, int] = attr.field(factory=dict)
    error_groups: list[dict[str, Any]] = attr.field(factory=list)
    report: str | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return _FACET_SCHEMA


def facets(config: ParallelRunConfig, summary: Mapping[str, Any] | None = None) -> OperatorLineage:
    """The step's datasets, and, once it has run (`summary`), the output's statistics and the run facet."""
    schemas = input_schemas(config)
    inputs = [
        InputDataset(location.namespace, location.name, facets=_schema_facets(schemas.get(location.uri)))
        for location in input_locations(config)
    ]
    if summary is None:
        output = output_location(config)
        outputs = [OutputDataset(output.namespace, output.name)] if output else []
        return OperatorLineage(inputs=inputs, outputs=outputs)
    where = summary.get("output")
    outputs = [_output(locate(where), summary)] if where else []
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={"parallelSteps": _run_facet(summary)})


def _output(location: DataLocation, summary: Mapping[str, Any]) -> OutputDataset:
    output_file = summary.get("output_file")
    schema = table_schema(output_file) if output_file and summary.get("append_row_format") == "parquet" else None
    statistics = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=summary.get("rows_written", 0),
        size=summary.get("output_bytes"),
        fileCount=1 if output_file else 0,
        producer=PRODUCER,
    )
    return OutputDataset(
        location.namespace,
        location.name,
        facets=_schema_facets(schema),
        outputFacets={"outputStatistics": statistics},
    )


def _schema_facets(schema: list[tuple[str, str]] | None) -> dict[str, Any]:
    if not schema:
        return {}
    fields = [schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in schema]
    return {"schema": schema_dataset.SchemaDatasetFacet(fields=fields, producer=PRODUCER)}


def _run_facet(summary: Mapping[str, Any]) -> ParallelStepsRunFacet:
    return ParallelStepsRunFacet(
        run_id=summary.get("run_id"),
        status=summary.get("status"),
        reused=bool(summary.get("reused")),
        counts={key: summary.get(key) or 0 for key in _COUNTS},
        error_groups=error_digest(summary),
        report=summary.get("report_url") or summary.get("report"),
        producer=PRODUCER,
    )
