"""The four Azure ML ParallelRunStep samples, configured as written for Azure (SDK v1).

    python examples/azure/prepare.py && python examples/azure/pipeline.py

Each function builds the sample's `ParallelRunConfig` and `ParallelRunStep` with the
values a notebook passes on Azure, `environment=` and `compute_target=` included (they
are accepted and have no effect here). The entry scripts in Code/ are unchanged Azure
shapes; models are declared in the step (`models=`) instead of registered in a workspace.
"""

from __future__ import annotations

from pathlib import Path

from parallel_steps import FileDataset, ParallelRunConfig, ParallelRunStep, TabularDataset

HERE = Path(__file__).resolve().parent
DATA, MODELS = HERE / "data", HERE / "models"
scripts_folder = str(HERE / "Code")
batch_env = "batch_environment"  # on Azure: an azureml.core.Environment
compute_target = "cpu-cluster"  # on Azure: an AmlCompute target


def mnist(output: str) -> ParallelRunStep:
    """MNIST images (a FileDataset) scored with a folder model, `Model.get_model_path("mnist-prs")`."""
    parallel_run_config = ParallelRunConfig(
        source_directory=scripts_folder,
        entry_script="digit_identification.py",
        mini_batch_size="5",
        error_threshold=10,
        output_action="append_row",
        append_row_file_name="mnist_outputs.txt",
        environment=batch_env,
        compute_target=compute_target,
        process_count_per_node=1,
        node_count=2,
    )
    return ParallelRunStep(
        name="predict-digits-mnist",
        parallel_run_config=parallel_run_config,
        inputs=[FileDataset(str(DATA / "mnist"))],
        output=output,
        models={"mnist-prs": str(MODELS / "mnist")},
        allow_reuse=False,
    )


def iris(output: str) -> ParallelRunStep:
    """Iris rows (a TabularDataset) scored with a single-file model named by an argument."""
    parallel_run_config = ParallelRunConfig(
        source_directory=scripts_folder,
        entry_script="iris_score.py",
        mini_batch_size="5MB",
        error_threshold=5,
        output_action="append_row",
        append_row_file_name="iris_outputs.txt",
        environment=batch_env,
        compute_target=compute_target,
        process_count_per_node=1,
        node_count=2,
        run_invocation_timeout=600,
    )
    return ParallelRunStep(
        name="example-iris",
        inputs=[TabularDataset(str(DATA / "iris"))],
        output=output,
        parallel_run_config=parallel_run_config,
        arguments=["--model_name", "iris-prs"],
        models={"iris-prs": str(MODELS / "iris" / "iris_model.pkl")},
        allow_reuse=True,
    )


def file_partitions(output: str) -> ParallelRunStep:
    """Files partitioned per folder (`partition_format`), one mini-batch per user and genre."""
    partitioned_file_dataset = FileDataset(
        str(DATA / "dataset_partition_test" / "*" / "*" / "*.wav"),
        partition_format="dataset_partition_test/{user}/{season}/{genres}.wav",
    )
    parallel_run_config = ParallelRunConfig(
        source_directory=scripts_folder,
        entry_script="total_file_size.py",
        partition_keys=["user", "genres"],
        error_threshold=5,
        output_action="append_row",
        append_row_file_name="file_size_outputs.txt",
        environment=batch_env,
        compute_target=compute_target,
        process_count_per_node=1,
        node_count=2,
        run_invocation_timeout=600,
    )
    return ParallelRunStep(
        name="summarize-file-size",
        inputs=[partitioned_file_dataset],
        output=output,
        parallel_run_config=parallel_run_config,
        allow_reuse=False,
    )


def oj_sales(output: str, hive: bool = False) -> ParallelRunStep:
    """A table partitioned per column, one mini-batch per Store and Brand: the key columns of the CSV
    file, or (hive) the Store=/Brand= folders `partition_by` writes."""
    source = DATA / "oj_sales_partitioned" if hive else DATA / "oj_sales" / "oj_sales.csv"
    parallel_run_config = ParallelRunConfig(
        source_directory=scripts_folder,
        entry_script="total_income.py",
        partition_keys=["Store", "Brand"],
        error_threshold=5,
        output_action="append_row",
        append_row_file_name="revenue_outputs.txt",
        environment=batch_env,
        compute_target=compute_target,
        process_count_per_node=1,
        node_count=2,
        run_invocation_timeout=600,
    )
    return ParallelRunStep(
        name="summarize-revenue",
        inputs=[TabularDataset(str(source))],
        output=output,
        parallel_run_config=parallel_run_config,
        allow_reuse=False,
    )


#: shape -> its step, given an output folder.
STEPS = {
    "mnist": mnist,
    "iris": iris,
    "file_partitions": file_partitions,
    "oj_sales": oj_sales,
    "oj_sales_hive": lambda output: oj_sales(output, hive=True),
}


if __name__ == "__main__":
    from results import read_output

    for shape, make in STEPS.items():
        summary = make(str(HERE / "out" / shape)).run()
        df = read_output(shape, summary["output_file"])
        print(f"{shape}: {summary['status']}, {df.shape[0]} rows x {df.shape[1]} columns in {summary['output_file']}")
