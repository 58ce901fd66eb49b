"""The keys of a step over partitions: ranges, globs against the folders found, and each partition's run of
mini-batch indexes."""

import pytest

from parallel_steps.config import ParallelRunConfig
from parallel_steps.errors import ConfigError
from parallel_steps.inputs.datasets import FileDataset
from parallel_steps.inputs.step_partitions import PartitionRange, check_spec, expand, resolve, spans


def test_a_day_range_holds_both_ends():
    assert PartitionRange(start="2026-01-30", end="2026-02-02").keys() == [
        "2026-01-30",
        "2026-01-31",
        "2026-02-01",
        "2026-02-02",
    ]


def test_an_hour_range_in_airflows_key_format():
    keys = PartitionRange(start="2026-01-01T22:00", end="2026-01-02T01:00", every="hour", format="%Y-%m-%dT%H:%M:%S")
    assert keys.keys() == ["2026-01-01T22:00:00", "2026-01-01T23:00:00", "2026-01-02T00:00:00", "2026-01-02T01:00:00"]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (PartitionRange(start="2026-01-02", end="2026-01-01"), "is empty"),
        (PartitionRange(start="2026-01-01", end="2026-01-02", every="hour", format="%Y-%m-%d"), "writes several hours"),
        (PartitionRange(start="2026-01-01", end="2026-01-02", format="%Y/%m/%d"), "is not a partition key"),
        (PartitionRange(start="1800-01-01", end="2100-01-01"), "more than 100000"),
        (["a", "a"], "'a' is named twice"),
        ([], "no partition given"),
        (["/abs"], "is not a partition key"),
        ([" "], "is not a partition key"),
        (["x" * 251], "is not a partition key"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, problem):
    with pytest.raises(ValueError, match=problem):
        check_spec(spec)


def test_globs_match_the_folders_where_the_first_input_names_the_partition(tmp_path):
    for name in ("day=2026-01-01", "day=2026-01-02", "day=2026-02-01", "other", "day="):
        (tmp_path / name).mkdir()
    inputs = [FileDataset(f"{tmp_path}/day={{partition}}/")]
    assert resolve(["2026-01-*"], inputs) == ["2026-01-01", "2026-01-02"]
    assert resolve(["2026-02-01", "*"], inputs) == ["2026-02-01", "2026-01-01", "2026-01-02"]  # each once
    with pytest.raises(ConfigError, match=r"'2027-\*' matches no partition in .*found: 2026-01-01, 2026-01-02"):
        resolve(["2027-*"], inputs)


def test_each_key_fills_every_input_key_after_key():
    inputs = [FileDataset("a/{partition}/x"), FileDataset(["b/{partition}", "c/{partition}.csv"])]
    assert [d.path for d in expand(inputs, ["k1", "k2"])] == [
        ["a/k1/x"],
        ["b/k1", "c/k1.csv"],
        ["a/k2/x"],
        ["b/k2", "c/k2.csv"],
    ]


def test_spans_take_each_keys_first_dataset():
    # two inputs per key: datasets started at 0, 2 (key a), 3, 3 (key b: its second input was empty), 5 (key c)
    assert spans(["a", "b", "c"], [0, 2, 3, 3, 5, 6], 8) == [("a", 0, 3), ("b", 3, 5), ("c", 5, 8)]


def test_strings_from_a_template_or_a_flag_take_every_shape():
    base = dict(entry_script="s.py", inputs="data/{partition}")
    assert ParallelRunConfig.from_dict({**base, "partitions": "2026-01-01, 2026-01-02"}).partitions == [
        "2026-01-01",
        "2026-01-02",
    ]
    ranged = ParallelRunConfig.from_dict({**base, "partitions": '{"start": "2026-01-01", "end": "2026-01-03"}'})
    assert isinstance(ranged.partitions, PartitionRange)
    assert len(ranged.partitions.keys()) == 3
    assert ParallelRunConfig(**base, partitions="*").partitions == ["*"]
