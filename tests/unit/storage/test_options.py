"""An engine's storage objects in a step's location fields become URLs, the objects kept by URL for their
credentials (the one walk both adapters use: Airflow's ObjectStoragePath, Prefect's bucket blocks)."""

from __future__ import annotations

from typing import Any

from parallel_steps.storage.options import locations_as_urls


class Bucket:
    def __init__(self, name: str):
        self.name = name


def url_of(value: Any) -> str | None:
    return f"s3://{value.name}" if isinstance(value, Bucket) else None


def test_objects_in_location_fields_become_urls_at_any_depth() -> None:
    raw, scored, model = Bucket("raw"), Bucket("scored"), Bucket("models")
    fields = {
        "inputs": [raw, "/data/local", {"path": Bucket("raw")}],
        "side_inputs": {"model": model},
        "output": scored,
        "name": "score",
    }
    resolved, found = locations_as_urls(fields, url_of)
    assert resolved == {
        "inputs": ["s3://raw", "/data/local", {"path": "s3://raw"}],
        "side_inputs": {"model": "s3://models"},
        "output": "s3://scored",
        "name": "score",
    }
    assert set(found) == {"s3://raw", "s3://models", "s3://scored"}
    assert found["s3://models"] is model


def test_other_fields_are_left_as_given() -> None:
    arguments = [Bucket("not-a-location")]
    resolved, found = locations_as_urls({"arguments": arguments, "inputs": "/in"}, url_of)
    assert resolved["arguments"] is arguments
    assert found == {}
