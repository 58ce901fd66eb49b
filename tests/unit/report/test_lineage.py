"""Where a step's inputs are, for lineage (Airflow inlets, Prefect's assets read): a glob or a partition is not
a place; the folder it is in is."""

from parallel_steps.config import ParallelRunConfig
from parallel_steps.report.lineage import input_locations


def test_an_input_is_located_at_the_folder_of_its_glob_or_its_partition():
    globbed = ParallelRunConfig(inputs=["/data/images/*.png"])
    assert [location.uri for location in input_locations(globbed)] == ["file:///data/images"]
    partitioned = ParallelRunConfig(
        inputs=["/lake/events/{partition}/", "s3://bucket/days/day={partition}/x.csv"], partitions=["2026-01-01"]
    )
    assert [location.uri for location in input_locations(partitioned)] == ["file:///lake/events", "s3://bucket/days"]
