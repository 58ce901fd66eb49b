"""Azure ML SDK v2 Python objects (`azure-ai-ml`) as steps: the iris job built with `parallel_run_function(...)`
as Azure's `sdk/python/jobs/parallel` notebook builds it, then bound in a `@pipeline`, given to `load_job`
and to `ParallelRunStep(parallel_run_config=...)`, and run here."""

from pathlib import Path

import pandas as pd
import pytest

from parallel_steps import ConfigError, ParallelRunStep, load_job

ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is not installed (pip install 'parallel-steps[azure]')")


@pytest.fixture
def iris_job(azure_examples, monkeypatch):
    """The notebook's parallel job and pipeline, built in the iris sample's folder (the SDK resolves `code` there)."""
    from azure.ai.ml import Input, Output
    from azure.ai.ml.constants import AssetTypes, InputOutputModes
    from azure.ai.ml.dsl import pipeline
    from azure.ai.ml.parallel import RunFunction, parallel_run_function

    monkeypatch.chdir(azure_examples / "pipelines" / "iris")
    batch_inferencing = parallel_run_function(
        name="batch_inferencing_with_mini_batch_size",
        display_name="Batch Inferencing with mini_batch_size",
        inputs=dict(
            input_data=Input(type=AssetTypes.MLTABLE, mode=InputOutputModes.DIRECT),
            score_model=Input(type=AssetTypes.URI_FOLDER, mode=InputOutputModes.DOWNLOAD),
        ),
        outputs=dict(job_output_file=Output(type=AssetTypes.URI_FILE, mode=InputOutputModes.RW_MOUNT)),
        input_data="${{inputs.input_data}}",
        mini_batch_size="10kb",
        instance_count=2,
        max_concurrency_per_instance=1,
        error_threshold=5,
        mini_batch_error_threshold=5,
        retry_settings=dict(max_retries=2, timeout=60),
        logging_level="DEBUG",
        environment_variables={"AZUREML_PARALLEL_EXAMPLE": "2a_sdk"},
        task=RunFunction(
            code="./script",
            entry_script="iris_prediction.py",
            program_arguments="--model ${{inputs.score_model}} --allowed_failed_percent 30 --task_overhead_timeout 1200",
            append_row_to="${{outputs.job_output_file}}",
        ),
    )

    @pipeline(display_name="parallel job for iris batch inferencing")
    def parallel_job_in_pipeline():
        node = batch_inferencing(
            input_data=Input(path="./neural-iris-mltable", type=AssetTypes.MLTABLE, mode=InputOutputModes.DIRECT),
            score_model=Input(path="./iris-model", type=AssetTypes.URI_FOLDER, mode=InputOutputModes.DOWNLOAD),
        )
        node.resources.instance_count = 1
        node.outputs.job_output_file.path = (
            "azureml://datastores/${{default_datastore}}/paths/${{name}}/aggregated_returns.csv"
        )

    return batch_inferencing, parallel_job_in_pipeline()


def test_a_pipeline_job_of_one_parallel_job_loads_as_its_step(iris_job):
    _, pipeline_job = iris_job
    config = load_job(pipeline_job, process_count_per_node=1)
    assert config.name == "batch-inferencing-with-mini-batc"  # cut at 32 characters
    assert (config.node_count, config.mini_batch_size, config.error_threshold, config.run_max_try) == (1, 10240, 5, 3)
    assert config.allowed_failed_percent == 30  # from program_arguments
    assert Path(config.source_directory).name == "script"
    assert config.environment_variables == {"AZUREML_PARALLEL_EXAMPLE": "2a_sdk"}
    summary = ParallelRunStep(parallel_run_config=config).run()
    scored = pd.read_csv(summary["output_file"], delimiter=" ", header=None)
    assert scored.shape == (150, 5)
    assert (scored[4].value_counts() > 40).all()


def test_the_parallel_run_function_node_is_a_parallel_run_config(iris_job, tmp_path):
    batch_inferencing, _ = iris_job
    from azure.ai.ml import Input

    node = batch_inferencing(
        input_data=Input(path="./neural-iris-mltable", type="mltable"),
        score_model=Input(path="./iris-model", type="uri_folder"),
    )
    step = ParallelRunStep(
        parallel_run_config=node, output=str(tmp_path / "out"), node_count=1, process_count_per_node=1
    )
    assert step.config.side_inputs["score_model"].endswith("iris-model")
    with pytest.raises(ConfigError, match=r"inputs\.input_data\.path: needs a path"):
        load_job(batch_inferencing)  # the job itself, its inputs not bound yet
