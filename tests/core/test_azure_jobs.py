"""Azure ML SDK v2 `type: parallel` job files: every key maps to a field, is accepted with no effect, or is
refused with one line naming it; the CLI and `load_job` run them as written."""

import json
import logging
import textwrap
import uuid

import pytest

from parallel_steps import ConfigError, InputError, ParallelRunConfig, load_job
from storage_servers import azure_store

from .conftest import cli

JOB = """
type: parallel
name: score_Images
inputs:
  images: {type: uri_folder, path: data, mode: ro_mount}
  model: {type: uri_folder, path: model}
  threshold: 0.5
outputs:
  scores: {type: uri_file, path: out/scores.csv}
input_data: ${{inputs.images}}
mini_batch_size: "3"
resources: {instance_count: 2}
max_concurrency_per_instance: 1
error_threshold: 4
logging_level: WARN
retry_settings: {max_retries: 1, timeout: 30}
environment_variables: {MODE: fast}
task:
  type: run_function
  code: src
  entry_script: score.py
  program_arguments: >-
    --model ${{inputs.model}} --threshold ${{inputs.threshold}} --data ${{inputs.images}}
  append_row_to: ${{outputs.scores}}
"""


def write_job(tmp_path, text=JOB, name="job.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_every_key_maps_to_its_field(tmp_path):
    config = load_job(write_job(tmp_path))
    assert config.name == "score-images"  # Azure job names may hold '_' and capitals
    assert [(d.type, d.path) for d in config.inputs] == [("files", [str(tmp_path / "data")])]
    assert config.side_inputs == {"model": str(tmp_path / "model")}
    assert config.arguments == [
        "--model",
        "${side_inputs.model}",  # the run puts the model's local copy there
        "--threshold",
        "0.5",
        "--data",
        str(tmp_path / "data"),
    ]
    assert (config.mini_batch_size, config.node_count, config.process_count_per_node) == (3, 2, 1)
    assert (config.error_threshold, config.logging_level, config.environment_variables) == (
        4,
        "WARNING",
        {"MODE": "fast"},
    )
    assert (config.run_max_try, config.run_invocation_timeout) == (2, 30)
    assert (config.source_directory, config.entry_script) == (str(tmp_path / "src"), "score.py")
    assert (config.output, config.append_row_file_name) == (str(tmp_path / "out"), "scores.csv")
    assert (config.output_action, config.output_format) == ("append_row", "text")  # Azure writes text, even to .csv


def test_keys_that_only_matter_on_azure_are_accepted_with_one_info_line(tmp_path, caplog):
    job = JOB + textwrap.dedent("""
        compute: azureml:cpu-cluster
        display_name: scoring
        description: nightly scoring
        tags: {owner: team}
        experiment_name: scoring
    """)
    job = job.replace("  type: run_function\n", "  type: run_function\n  environment: {image: x, conda_file: y}\n")
    job = job.replace("--data", "--copy_logs_to_parent True --data")
    with caplog.at_level(logging.INFO, logger="parallel_steps"):
        config = load_job(write_job(tmp_path, job))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("parallel_steps")]
    assert lines == [
        f"{tmp_path / 'job.yml'}: compute, display_name, description, tags, experiment_name, task.environment, "
        "--copy_logs_to_parent accepted as Azure ML takes them, no effect here"
    ]
    assert config.description is None  # nothing of them reaches the step


def test_parallel_run_step_settings_in_program_arguments_set_their_fields(tmp_path):
    job = JOB.replace(
        "--data ${{inputs.images}}",
        "--allowed_failed_percent 30 --progress_update_timeout=600 --mini_batch_error_threshold 2 --error_threshold 4",
    )
    config = load_job(write_job(tmp_path, job))
    assert (config.allowed_failed_percent, config.progress_update_timeout) == (30, 600)
    assert config.mini_batch_error_threshold == 2
    assert "--allowed_failed_percent" in config.arguments  # the script sees them too, as on Azure ML


def test_mltable_inputs_are_tables_or_files(tmp_path):
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / "MLTable").write_text(
        textwrap.dedent("""
        type: mltable
        paths:
          - pattern: ../data/*.csv
        transformations:
          - read_delimited: {delimiter: ";", encoding: ascii, header: no_header, infer_column_types: true}
        """)
    )
    (tmp_path / "music").mkdir()
    (tmp_path / "music" / "MLTable").write_text(
        "paths:\n  - folder: ./songs\ntransformations:\n"
        "  - extract_columns_from_partition_format: {partition_format: '/{user}/{genre}.wav'}\n"
    )
    job = JOB.replace("images: {type: uri_folder, path: data, mode: ro_mount}", "images: {type: mltable, path: table}")
    table = load_job(write_job(tmp_path, job)).inputs[0]
    assert (table.type, table.format, table.path) == ("tabular", "csv", [str(tmp_path / "data" / "*.csv")])
    assert table.read_options == {"delimiter": ";", "encoding": "ascii", "header": False}
    job = job.replace("path: table}", "path: music}").replace("--data ${{inputs.images}}", "")
    files = load_job(write_job(tmp_path, job + "partition_keys: [genre]\n"))
    assert (files.inputs[0].type, files.inputs[0].partition_format) == ("files", "/{user}/{genre}.wav")
    assert files.partition_keys == ["genre"]


def test_a_uri_file_input_is_one_file_and_without_a_size_a_mini_batch_holds_one_file(tmp_path):
    job = JOB.replace("{type: uri_folder, path: data, mode: ro_mount}", "{type: uri_file, path: data/one.png}")
    config = load_job(write_job(tmp_path, job.replace('mini_batch_size: "3"\n', "")))
    assert [(d.type, d.path) for d in config.inputs] == [("files", [str(tmp_path / "data" / "one.png")])]
    assert config.mini_batch_size == 1  # the v2 default


def test_an_output_azure_ml_places_goes_to_the_run_folder_under_its_file_name(tmp_path):
    job = JOB.replace(
        "path: out/scores.csv", "path: 'azureml://datastores/${{default_datastore}}/paths/${{name}}/aggregated.csv'"
    )
    config = load_job(write_job(tmp_path, job))
    assert (config.output, config.append_row_file_name) == (None, "aggregated.csv")
    without = load_job(write_job(tmp_path, job.replace("  append_row_to: ${{outputs.scores}}\n", "")))
    assert without.output_action == "summary_only"  # as on Azure ML: nothing is aggregated


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("type: parallel", "type: command"),
            "type: 'command' is not a parallel job (parallel-steps runs type: parallel)",
        ),
        (("resources:", "identity: {type: managed}\nresources:"), "identity: has no meaning here (supported: "),
        (("  code: src", "  code: src\n  timeout: 3"), "task.timeout: has no meaning here (supported: "),
        (("{instance_count: 2}", "{instance_count: 2, shm_size: 2g}"), "resources.shm_size: has no meaning here"),
        (("{max_retries: 1, timeout: 30}", "{retries: 1}"), "retry_settings.retries: has no meaning here"),
        (
            ("input_data: ${{inputs.images}}", "input_data: ${{inputs.nope}}"),
            "input_data: '${{inputs.nope}}' names no input",
        ),
        (
            ("input_data: ${{inputs.images}}", "input_data: ${{inputs.threshold}}"),
            "input_data: input threshold is not data",
        ),
        (("path: data,", "path: azureml:mnist:1,"), "inputs.images.path: azureml:mnist:1 names Azure ML data"),
        (("path: data,", "path: '${{parent.jobs.prep.outputs.png}}',"), "inputs.images.path: ${{parent.jobs.prep"),
        (
            ("{type: uri_folder, path: model}", "{type: custom, path: model}"),
            "inputs.model.type: 'custom' is not supported",
        ),
        (
            ("--threshold ${{inputs.threshold}}", "--seed ${{inputs.seed}}"),
            "task.program_arguments: ${{inputs.seed}} names no input (have: ",
        ),
        (("--data", "--run ${{name}} --data"), "task.program_arguments: ${{name}} cannot be resolved here"),
        (
            ("--data", "--error_threshold 9 --data"),
            "error_threshold: 4 conflicts with --error_threshold 9 in task.program_arguments",
        ),
        (("path: out/scores.csv", "path: azureml://x/y.csv"), None),  # fine: the run folder holds it
        (("--data", "--out ${{outputs.scores}} --data"), None),  # a local output can be named
        (
            ("type: run_function", "type: run_command"),
            "task.type: 'run_command' is not supported here (use run_function)",
        ),
        (("name: score_Images", "name: s"), "name: 's' cannot be a step name"),
    ],
)
def test_what_has_no_meaning_here_is_one_line_naming_it(tmp_path, change, message):
    job = JOB.replace(*change)
    assert job != JOB, change
    if message is None:
        load_job(write_job(tmp_path, job))
        return
    with pytest.raises(ConfigError) as error:
        load_job(write_job(tmp_path, job))
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_an_output_azure_ml_places_cannot_be_an_argument(tmp_path):
    job = JOB.replace("path: out/scores.csv", "path: azureml://x/y.csv").replace(
        "--data", "--out ${{outputs.scores}} --data"
    )
    with pytest.raises(
        ConfigError, match=r"^outputs\.scores: is used in task\.program_arguments, so it needs a local path"
    ):
        load_job(write_job(tmp_path, job))


def test_an_unsupported_mltable_transformation_is_named(tmp_path):
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / "MLTable").write_text(
        "paths:\n  - file: a.csv\ntransformations:\n  - read_delimited: {}\n  - take: 10\n"
    )
    job = JOB.replace("images: {type: uri_folder, path: data, mode: ro_mount}", "images: {type: mltable, path: table}")
    with pytest.raises(ConfigError) as error:
        load_job(write_job(tmp_path, job))
    assert str(error.value).startswith("inputs.images MLTable transformation take: is not supported here (supported: ")


def test_a_step_file_is_not_a_job_and_a_missing_file_is_named(tmp_path):
    step = tmp_path / "step.yaml"
    step.write_text("entry_script: score.py\n")
    with pytest.raises(ConfigError, match=r"^type: is missing: this is not an Azure ML job file"):
        load_job(step)
    with pytest.raises(InputError, match=r"nope\.yml: job file not found"):
        load_job(tmp_path / "nope.yml")
    assert ParallelRunConfig.from_yaml(write_job(tmp_path)).name == "score-images"  # from_yaml reads both


def test_the_cli_runs_a_job_file_and_refuses_a_bad_one_in_one_line(tmp_path, make_files, write_script):
    make_files(7)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.txt").write_text("w")
    (tmp_path / "src").mkdir()
    write_script(
        """
        import argparse, os
        def init():
            global model
            parser = argparse.ArgumentParser()
            parser.add_argument("--model")
            model = os.listdir(parser.parse_known_args()[0].model)[0]
        def run(mini_batch):
            return [f"{os.path.basename(p)} {model} {os.environ['MODE']}" for p in mini_batch]
        """,
        name="src/score.py",
    )
    job = write_job(tmp_path)
    done = cli("run", job, "--json", "--set", "process_count_per_node=1")
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "out" / "scores.csv").read_text().splitlines()
    assert lines == [f"f{i:04d}.txt w.txt fast" for i in range(7)]

    job.write_text(JOB.replace("resources:", "queue_settings: {job_tier: spot}\nresources:"))
    done = cli("run", job)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("parallel-steps: queue_settings: has no meaning here (supported: ")
    assert len(done.stderr.strip().splitlines()) == 1


DATASTORE_JOB = """
type: parallel
inputs:
  images: {type: uri_folder, path: data}
outputs:
  scores: {type: uri_file, path: azureml://datastores/workspaceblobstore/paths/scored/scores.txt}
input_data: ${{inputs.images}}
mini_batch_size: 2
task:
  code: src
  entry_script: score.py
  append_row_to: ${{outputs.scores}}
"""


def test_a_datastore_output_is_written_to_the_store_the_job_maps_it_to(
    tmp_path, make_files, write_script, storage_servers, monkeypatch
):
    _, azurite = storage_servers
    store = azure_store(azurite.endpoint, f"t{uuid.uuid4().hex[:12]}")
    for variable, value in store.env.items():
        monkeypatch.setenv(variable, value)
    make_files(5)
    (tmp_path / "src").mkdir()
    write_script(
        "import os\ndef run(mini_batch):\n    return [os.path.basename(p) for p in mini_batch]\n", "src/score.py"
    )
    mapped = DATASTORE_JOB + f"datastores: {{workspaceblobstore: '{store.root}'}}\n"
    credentials = json.dumps(store.storage_options())
    done = cli(
        "run",
        write_job(tmp_path, mapped),
        "--set",
        f"storage_options={credentials}",
        "--set",
        "process_count_per_node=1",
    )
    assert done.returncode == 0, done.stderr
    assert store.read_bytes(store.url("scored", "scores.txt")).decode().splitlines() == [
        f"f{i:04d}.txt" for i in range(5)
    ]
    assert not (tmp_path / "scored").exists()

    unmapped = cli("run", write_job(tmp_path, DATASTORE_JOB, "unmapped.yml"))
    assert unmapped.returncode == 2
    assert unmapped.stderr.strip().splitlines() == [
        "parallel-steps: output: azureml://datastores/workspaceblobstore/paths/scored is on datastore "
        "'workspaceblobstore', which is not mapped here (map it: datastores: {workspaceblobstore: FOLDER_OR_URL} "
        "in the step, or PARALLEL_STEPS_DATASTORES in the environment)"
    ]
    monkeypatch.setenv("PARALLEL_STEPS_DATASTORES", json.dumps({"workspaceblobstore": store.root}))
    assert load_job(tmp_path / "unmapped.yml").output == store.url("scored")  # the environment's mapping


def test_datastore_paths_of_a_v1_config_resolve_through_its_datastores(tmp_path, monkeypatch):
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=["azureml://datastores/raw/paths/images/"],
        side_inputs={"labels": "azureml://datastores/raw/paths/labels.json"},
        output="azureml://datastores/curated/paths",
        datastores={"raw": "s3://raw-bucket/", "curated": str(tmp_path)},
    )
    assert config.inputs[0].path == ["s3://raw-bucket/images"]
    assert (config.side_inputs, config.output) == ({"labels": "s3://raw-bucket/labels.json"}, str(tmp_path))
    monkeypatch.setenv("PARALLEL_STEPS_DATASTORES", "not json")
    with pytest.raises(ConfigError, match=r"^PARALLEL_STEPS_DATASTORES: is not a JSON mapping"):
        ParallelRunConfig(entry_script="score.py", inputs=["azureml://datastores/raw/paths/images/"])
