"""The four Azure ML ParallelRunStep sample shapes of examples/azure, run as a migrating user would: the v1
configs as written for Azure through the Python API, the v2 job files through `parallel-steps run`, and
every output read back with the notebooks' own `pandas.read_csv` calls and column labels."""

import runpy
from pathlib import Path

import pandas as pd
import pytest
from sklearn.datasets import load_iris

from .conftest import cli_json

SHAPES = ["mnist", "iris", "file_partitions", "oj_sales", "oj_sales_hive"]
JOBS = {"mnist": "mnist", "iris": "iris", "file_partitions": "file_partitions", "oj_sales": "oj_sales_hive"}


@pytest.fixture(scope="module")
def v1(azure_examples):
    """shape -> run summary of the sample's ParallelRunStep, configured as written for Azure (pipeline.py)."""
    steps = runpy.run_path(str(azure_examples / "pipeline.py"))["STEPS"]
    return {shape: make(str(azure_examples / "out" / "v1" / shape)).run() for shape, make in steps.items()}


@pytest.fixture(scope="module")
def read_output(azure_examples):
    return runpy.run_path(str(azure_examples / "results.py"))["read_output"]


def test_the_configs_as_written_for_azure_run_with_their_environment_and_compute_target(v1):
    for shape in SHAPES:
        summary = v1[shape]
        assert summary["status"] == "Succeeded", (shape, summary["status_reason"])
        assert (summary["config"]["environment"], summary["config"]["compute_target"]) == (
            "batch_environment",
            "cpu-cluster",
        )
        assert summary["append_row_format"] == "text"


def test_mnist_images_scored_with_a_folder_model(v1, read_output, azure_examples):
    df = read_output("mnist", v1["mnist"]["output_file"])  # read_csv(delimiter=":", header=None)
    assert df.shape == (40, 2)
    labels = pd.read_csv(azure_examples / "data" / "mnist_labels.csv")
    scored = labels.merge(df, on="Filename")
    assert len(scored) == 40
    assert (scored["Prediction"] == scored["Label"]).mean() > 0.8


def test_iris_rows_scored_with_a_single_file_model(v1, read_output):
    df = read_output("iris", v1["iris"]["output_file"])  # read_csv(delimiter=" ", header=None)
    assert df.shape == (150, 5)
    truth = pd.DataFrame(load_iris().data, columns=list(df.columns[:4]))
    truth["variety"] = pd.Series(load_iris().target).map({0: "Setosa", 1: "Versicolor", 2: "Virginica"})
    merged = df.merge(truth, on=list(df.columns[:4]), suffixes=("", "_true"))
    assert (merged["variety"] == merged["variety_true"]).mean() > 0.9
    assert v1["iris"]["mini_batches_total"] == 3  # one per file: a mini-batch never crosses files


def test_files_partitioned_per_folder_one_mini_batch_per_user_and_genre(v1, read_output):
    summary = v1["file_partitions"]
    assert summary["mini_batches_total"] == 5  # as the Azure notebook says: 6 files, 5 (user, genres) pairs
    df = read_output("file_partitions", summary["output_file"])  # read_csv(delimiter=",", header=None)
    assert df.shape == (6, 6)
    pairs = df.groupby(["user", "genres"])
    assert len(pairs) == 5
    assert pairs["File Size"].sum().tolist() == pairs["Total File Size of Partition"].first().tolist()
    assert df.loc[df["user"] == "user4", "File Name"].tolist() == ["piano.wav", "piano.wav"]


@pytest.mark.parametrize("shape", ["oj_sales", "oj_sales_hive"])
def test_a_table_partitioned_per_column_has_its_keys_last(v1, read_output, azure_examples, shape):
    df = read_output(shape, v1[shape]["output_file"])  # read_csv(delimiter=" ", header=None), 19 labels
    assert df.shape == (72, 19)
    assert v1[shape]["mini_batches_total"] == 9
    sales = pd.read_csv(azure_examples / "data" / "oj_sales" / "oj_sales.csv")
    merged = df.merge(sales, on=["WeekStarting", "Store", "Brand"], suffixes=("", "_source"))
    assert len(merged) == 72
    assert (merged["Quantity"] == merged["Quantity_source"]).all()
    totals = sales.groupby(["Store", "Brand"])["INCOME"].sum()
    assert df.groupby(["Store", "Brand"])["total_income"].first().round(6).equals(totals.round(6))


def test_the_hive_folders_give_the_same_output_as_the_key_columns(v1):
    lines = {shape: sorted(Path(v1[shape]["output_file"]).read_text().splitlines()) for shape in SHAPES[3:]}
    assert lines["oj_sales"] == lines["oj_sales_hive"]


@pytest.mark.parametrize("shape", list(JOBS))
def test_the_v2_job_files_run_with_the_cli_as_written(v1, read_output, azure_examples, tmp_path, shape):
    job = azure_examples / "jobs" / f"{shape}.yml"
    code, summary = cli_json("run", job, "--output", tmp_path / "out")
    assert code == 0, summary["status_reason"]
    df = read_output(shape, summary["output_file"])
    expected = read_output(shape, v1[JOBS[shape]]["output_file"])
    columns = list(df.columns)
    assert df.sort_values(columns).reset_index(drop=True).equals(expected.sort_values(columns).reset_index(drop=True))
