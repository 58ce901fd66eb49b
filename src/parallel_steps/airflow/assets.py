"""Airflow Assets of a parallel step, so that DAGs can be scheduled on its output (`schedule=[asset]`).

The outlet is the output folder or URL the author set, else the task's folder under the run root (where
each of its runs keeps its `output/`); the inlets are the inputs. An author's own `outlets=` (or
`outlets=[]`: none) and `inlets=` replace them. Both are known when the DAG is parsed: a templated
output or input declares nothing. On success every outlet's event carries the run's facts (run id, rows
written, mini-batches run, reused and failed, the output file's URI); a reused run succeeds, so it emits
the event too (its `reused` is true). `StepLineage` gives the operator this, and the OpenLineage facets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

from ..config import ParallelRunConfig
from ..report.lineage import input_locations, locate, output_location, run_facts
from .partitions import partition_events, partition_output_folder


def default_outlets(config: ParallelRunConfig, dag_id: str | None, task_id: str) -> list[Asset]:
    """The step's output as an Asset: the author's output folder, else the task's folder of runs."""
    output = output_location(config)
    if output is not None:
        return [Asset(uri=output.uri)]
    if dag_id is None:
        return []
    folder = config.resolved_run_root() / "airflow" / dag_id / task_id  # see operators.run_location
    return [Asset(uri=locate(str(folder)).uri)]


def declare(operator: Any, config: ParallelRunConfig, outlets: Any, inlets: Any) -> None:
    """Give the operator its default outlets and inlets, unless the author set them (None: not set)."""
    if outlets is None and not operator.is_templated("output"):
        operator.outlets = default_outlets(config, operator.dag_id if operator.has_dag() else None, operator.task_id)
    elif outlets is None and (folder := partition_output_folder(operator.output_folder)):
        operator.outlets = [Asset(uri=locate(folder).uri)]  # the DAG run's partition goes on its event
    if inlets is None and not operator.is_templated("inputs"):
        operator.inlets = [Asset(uri=location.uri) for location in input_locations(config)]


def record_events(operator: Any, context: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    """Put the run's facts in the extra of each outlet Asset's event (Airflow emits it when the task succeeds);
    a step over partitions emits an event per partition that succeeded, each one's facts under its key."""
    events = context.get("outlet_events")
    if events is None:
        return
    facts = run_facts(summary)
    keys, by_key = partition_events(summary)
    for outlet in operator.outlets:
        if isinstance(outlet, Asset):
            events[outlet].extra.update(facts)
            if keys:
                events[outlet].extra["partitions"] = by_key
                events[outlet].add_partitions(keys)


class StepLineage:
    """What a parallel step task publishes about its data: the outlet events' extra, and the OpenLineage
    provider's `get_openlineage_facets_on_*` (OpenLineage is imported only when its listener calls them)."""

    _summary: dict[str, Any] | None = None  # the run's, once it ended

    def _record(self, summary: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        """Keep the summary for the lineage facets; the run's facts go in the outlet Assets' events."""
        self._summary = dict(summary)
        record_events(self, context, summary)

    def get_openlineage_facets_on_start(self) -> Any:
        from .lineage import facets

        return facets(self._lineage_config())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from .lineage import facets

        return facets(self._lineage_config(), self._summary)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_complete(task_instance)

    def _lineage_config(self) -> ParallelRunConfig:
        """The task's fields (rendered by the time the listener asks) on its base config."""
        operator: Any = self
        config: ParallelRunConfig = operator.rendered_config()
        return config
