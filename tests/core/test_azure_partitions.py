"""Partition values in paths: Azure ML's partition_format, hive folders, and how partition_keys group by them."""

from datetime import datetime

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from parallel_steps import ConfigError, FileDataset, ParallelRunConfig, TabularDataset
from parallel_steps.inputs.partitions import PartitionFormat, hive_values
from parallel_steps.inputs.planner import Planner


class TestPartitionFormat:
    def test_keys_are_read_from_the_end_of_the_path(self):
        path_format = PartitionFormat("dataset_partition_test/{user}/{season}/{genres}.wav")
        assert path_format.keys == ["user", "season", "genres"]
        assert path_format.values("/data/dataset_partition_test/user1/winter/disco.wav") == {
            "user": "user1",
            "season": "winter",
            "genres": "disco",
        }
        assert path_format.values("/data/other/user1/winter/disco.wav") is None  # the literal folder differs
        assert path_format.values("/data/dataset_partition_test/user1/disco.wav") is None

    def test_wildcards_and_dates(self):
        path_format = PartitionFormat("/{Department}/{PartitionDate:yyyy/MM/dd}/*.csv")
        assert path_format.values("s3://bucket/Accounts/2019/01/31/data.csv") == {
            "Department": "Accounts",
            "PartitionDate": datetime(2019, 1, 31),
        }
        assert path_format.values("s3://bucket/Accounts/2019/13/31/data.csv") is None  # not a date
        assert PartitionFormat("/{user}/*_{take}.wav").values("/d/u1/song_2.wav") == {"user": "u1", "take": "2"}

    @pytest.mark.parametrize(
        ("text", "words"),
        [
            ("/data/*.wav", "names no key"),
            ("/{user}/{user}/*.wav", "names 'user' twice"),
            ("/{us-er}/*.wav", "'us-er' is not a valid key name"),
            ("/{user/*.wav", "unbalanced brace"),
        ],
    )
    def test_a_malformed_format_says_what_is_wrong(self, text, words):
        with pytest.raises(ValueError, match=words):
            PartitionFormat(text)

    def test_hive_folders_below_the_named_folder_become_values(self):
        values = hive_values("/d/sales/Store=2/Brand=minute%2Emaid/day=x/part-0.parquet", "/d/sales")
        assert values == {"Store": 2, "Brand": "minute.maid", "day": "x"}
        assert hive_values("/d/sales/Store=__HIVE_DEFAULT_PARTITION__/p.parquet", "/d/sales/**/*.parquet") == {
            "Store": None
        }
        assert hive_values("/d/Year=2024/sales/p.parquet", "/d/Year=2024/sales") == {}  # above what was named
        assert hive_values("/d/Store=007/p.parquet", "/d") == {"Store": "007"}  # not a plain integer


class TestConfig:
    def test_a_typo_inside_an_input_names_the_input_and_the_field(self):
        with pytest.raises(ConfigError) as error:
            ParallelRunConfig(inputs=[{"type": "files", "path": "x", "partiton_format": "/{a}/*"}])
        assert str(error.value) == (
            "inputs[0].partiton_format: is not a field of a files input (valid: path, partition_format)"
        )

    def test_a_bad_partition_format_names_the_input(self):
        with pytest.raises(ConfigError, match=r"^inputs\[1\]\.partition_format: .*names no key"):
            ParallelRunConfig(inputs=["a", {"type": "files", "path": "b", "partition_format": "/x/*.wav"}])

    def test_file_partition_keys_must_be_keys_of_the_format(self):
        with pytest.raises(ConfigError) as error:
            ParallelRunConfig(inputs=[FileDataset("d", partition_format="/{user}/*.wav")], partition_keys=["genre"])
        assert str(error.value) == (
            "partition_keys: 'genre' is not a key of partition_format '/{user}/*.wav' (have: user)"
        )


def _music(root):
    for user, season, genre in [("u1", "winter", "disco"), ("u1", "fall", "jazz"), ("u2", "fall", "disco")]:
        (root / user / season).mkdir(parents=True, exist_ok=True)
        (root / user / season / f"{genre}.wav").write_bytes(b"x")


class TestPlanning:
    def test_files_group_into_one_mini_batch_per_key_combination(self, tmp_path):
        _music(tmp_path / "music")
        dataset = FileDataset(str(tmp_path / "music"), partition_format="/{user}/{season}/{genre}.wav")
        batches = list(Planner([dataset], 10, ["genre"]).mini_batches())
        assert [b.keys for b in batches] == [("disco",), ("jazz",)]
        assert [len(b.paths) for b in batches] == [2, 1]
        assert batches[0].describe() == "{'genre': 'disco'} in 2 file(s)"

    def test_a_file_that_does_not_match_the_format_is_named(self, tmp_path):
        _music(tmp_path / "music")
        (tmp_path / "music" / "notes.txt").write_text("x")
        dataset = FileDataset(str(tmp_path / "music"), partition_format="/{user}/{season}/{genre}.wav")
        with pytest.raises(Exception, match=r"notes\.txt: does not match partition_format"):
            list(Planner([dataset], 10, ["user"]).mini_batches())

    def test_keys_of_hive_folders_and_of_columns_give_the_same_mini_batches(self, tmp_path):
        frame = pd.DataFrame({"Store": [1, 1, 2, 2, 2], "Brand": list("abaab"), "x": range(5)})
        frame.to_csv(tmp_path / "flat.csv", index=False)
        ds.write_dataset(
            pa.Table.from_pandas(frame),
            tmp_path / "hive",
            format="parquet",
            partitioning=["Store", "Brand"],
            partitioning_flavor="hive",
        )
        hive = [
            (b.keys, b.items)
            for b in Planner([TabularDataset(str(tmp_path / "hive"))], 1, ["Store", "Brand"]).mini_batches()
        ]
        flat = [
            (b.keys, b.items)
            for b in Planner([TabularDataset(str(tmp_path / "flat.csv"))], 1, ["Store", "Brand"]).mini_batches()
        ]
        assert hive == flat == [((1, "a"), 1), ((1, "b"), 1), ((2, "a"), 2), ((2, "b"), 1)]
