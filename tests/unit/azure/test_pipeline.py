"""Azure ML pipeline files read and bound without running anything: the jobs and their order, components
bound by the pipeline, `${{parent...}}` references, outputs' places, datastores, command lines, and the
one-line errors that name the key."""

import textwrap
from pathlib import Path

import pytest

from parallel_steps import ConfigError
from parallel_steps.azure.binding import Bindings, bind
from parallel_steps.azure.command import command_line
from parallel_steps.azure.engine import pipeline_params, trigger_inputs
from parallel_steps.azure.mltable import mltable_input
from parallel_steps.azure.pipeline import read_pipeline
from parallel_steps.azure.pipeline_run import PipelineOptions, PipelineRun

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "azure" / "pipelines"

PIPELINE = """
type: pipeline
display_name: score things
settings: {default_compute: azureml:cpu-cluster, default_datastore: azureml:mystore}
inputs:
  raw: {type: uri_folder, path: data}
  threshold: 0.5
outputs:
  report: {type: uri_file}
jobs:
  summarize:
    type: command
    inputs:
      scores: ${{parent.jobs.score.outputs.scored}}
    outputs:
      report: ${{parent.outputs.report}}
    code: src
    command: python summarize.py --scores ${{inputs.scores}} --out ${{outputs.report}} $[[--limit ${{inputs.limit}}]]
  prepare:
    type: command
    inputs:
      raw: ${{parent.inputs.raw}}
    outputs:
      clean: {type: uri_folder}
    code: src
    command: python prepare.py --raw ${{inputs.raw}} --clean ${{outputs.clean}}
  score:
    type: parallel
    component: ./score.yml
    inputs:
      rows: ${{parent.jobs.prepare.outputs.clean}}
      threshold: ${{parent.inputs.threshold}}
    outputs:
      scored:
        path: azureml://datastores/${{default_datastore}}/paths/${{name}}/scores.txt
"""

COMPONENT = """
type: parallel
name: score_rows
version: 3
inputs:
  rows: {type: uri_folder}
  threshold: {type: number, default: 0.9}
  model: {type: uri_folder, optional: true}
outputs:
  scored: {type: uri_file}
input_data: ${{inputs.rows}}
mini_batch_size: "2"
task:
  code: ./code
  entry_script: score.py
  program_arguments: --threshold ${{inputs.threshold}}
  append_row_to: ${{outputs.scored}}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def pipeline_file(tmp_path):
    write(tmp_path, "score.yml", COMPONENT)
    return write(tmp_path, "pipeline.yml", PIPELINE)


def bindings(pipeline, tmp_path, **options) -> Bindings:
    return Bindings(pipeline, "run-1", tmp_path / "run-1", **options)


def test_jobs_run_after_the_jobs_they_read(pipeline_file):
    pipeline = read_pipeline(pipeline_file)
    assert list(pipeline.nodes) == ["prepare", "score", "summarize"]  # the file lists summarize first
    assert {name: node.upstream for name, node in pipeline.nodes.items()} == {
        "prepare": (),
        "score": ("prepare",),
        "summarize": ("score",),
    }


def test_a_component_is_bound_by_its_node_typed_by_its_declarations(pipeline_file, tmp_path):
    score = read_pipeline(pipeline_file).nodes["score"]
    assert score.kind == "parallel"
    assert score.job["inputs"] == {
        "rows": {"type": "uri_folder", "path": "${{parent.jobs.prepare.outputs.clean}}"},
        "threshold": "${{parent.inputs.threshold}}",
    }  # the optional model is left out; the threshold's default is replaced
    assert score.job["task"]["code"] == str(tmp_path / "code")  # relative to the component's file
    assert "version" not in score.job
    assert score.job["outputs"]["scored"]["type"] == "uri_file"


def test_references_become_values_and_outputs_get_places(pipeline_file, tmp_path):
    pipeline = read_pipeline(pipeline_file, {"threshold": "0.7"})
    run = bindings(pipeline, tmp_path, datastores={"mystore": "/mnt/store"})
    prepare = bind(pipeline.nodes["prepare"], run)
    assert prepare["inputs"]["raw"] == {"type": "uri_folder", "path": str(tmp_path / "data")}
    assert prepare["outputs"]["clean"]["path"] == str(tmp_path / "run-1" / "jobs" / "prepare" / "outputs" / "clean")
    run.produced["prepare"] = {"clean": "/data/clean"}
    score = bind(pipeline.nodes["score"], run)
    assert score["inputs"] == {"rows": {"type": "uri_folder", "path": "/data/clean"}, "threshold": "0.7"}
    assert score["outputs"]["scored"]["path"] == "/mnt/store/run-1/scores.txt"  # settings.default_datastore
    run.produced["score"] = {"scored": "/mnt/store/run-1/scores.txt"}
    summarize = bind(pipeline.nodes["summarize"], run)
    assert summarize["outputs"]["report"]["path"] == str(tmp_path / "run-1" / "outputs" / "report")
    assert command_line(summarize, "jobs.summarize") == (
        f"python summarize.py --scores /mnt/store/run-1/scores.txt --out {tmp_path / 'run-1' / 'outputs' / 'report'}"
    )  # the optional part names an input not given: dropped


def test_an_unmapped_datastore_is_one_line_saying_how_to_map_it(pipeline_file, tmp_path):
    pipeline = read_pipeline(pipeline_file)
    with pytest.raises(ConfigError) as error:
        bindings(pipeline, tmp_path).node_outputs(pipeline.nodes["score"])
    assert str(error.value).startswith(
        "jobs.score.outputs.scored: azureml://datastores/mystore/paths/run-1/scores.txt is on datastore 'mystore'"
    )
    assert "--set datastores.mystore=FOLDER_OR_URL" in str(error.value)
    given = bindings(pipeline, tmp_path, output_paths={"jobs.score.outputs.scored": "/out/s.txt"})
    assert given.node_outputs(pipeline.nodes["score"])["scored"]["path"] == "/out/s.txt"


def test_an_output_not_produced_yet_names_the_job_to_run_first(pipeline_file, tmp_path):
    pipeline = read_pipeline(pipeline_file)
    with pytest.raises(ConfigError, match=r"run job prepare first, or give it: --set jobs.prepare.outputs.clean="):
        bind(pipeline.nodes["score"], bindings(pipeline, tmp_path, datastores={"mystore": "/s"}))


def test_a_parallel_job_becomes_a_step_named_after_it(pipeline_file, tmp_path):
    (tmp_path / "code").mkdir()
    options = PipelineOptions(datastores={"mystore": str(tmp_path / "store")}, fields={"node_count": "1"})
    run = PipelineRun(read_pipeline(pipeline_file), options, tmp_path / "run", preview=True)
    run.assume_produced()
    config = run.parallel_config(run.pipeline.nodes["score"], make=False)
    assert config.name == "score"
    assert (config.mini_batch_size, config.node_count, config.arguments) == (2, 1, ["--threshold", "0.5"])
    assert [d.path for d in config.inputs] == [[str(tmp_path / "run" / "jobs" / "prepare" / "outputs" / "clean")]]
    assert (config.output, config.append_row_file_name) == (str(tmp_path / "store" / "run"), "scores.txt")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("type: pipeline", "type: pipeline\nschedule: daily"), "schedule: has no meaning here"),
        (
            ("clean: {type: uri_folder}", "clean: {type: uri_folder}\n      extra: {}"),
            "jobs.score: ${{parent.jobs.prepare",
        ),
        (
            ("component: ./score.yml", "component: azureml:score_rows:3"),
            "jobs.score.component: azureml:score_rows:3 names a registered component",
        ),
        (("prepare.outputs.clean", "prepare.outputs.cleaned"), "job prepare has no output cleaned"),
        (("parent.jobs.score.outputs", "parent.jobs.scorer.outputs"), "names no job"),
        (
            ("rows: ${{parent.jobs.prepare", "rowz: ${{parent.jobs.prepare"),
            "jobs.score.inputs.rowz: is not an input of the component",
        ),
        (
            ("type: command\n    inputs:\n      raw", "type: sweep\n    inputs:\n      raw"),
            "jobs.prepare.type: 'sweep' is not run here",
        ),
    ],
)
def test_what_cannot_run_is_one_line_naming_the_key(pipeline_file, tmp_path, change, message):
    text = textwrap.dedent(PIPELINE).replace(*change)
    if "extra" in change[1]:  # two jobs reading each other
        text = text.replace("raw: ${{parent.inputs.raw}}", "raw: ${{parent.jobs.score.outputs.scored}}")
        message = "read each other's outputs in a cycle"
    write(tmp_path, "pipeline.yml", text)
    with pytest.raises(ConfigError) as error:
        read_pipeline(pipeline_file)
    assert message in str(error.value)


def test_the_oj_sales_sample_reads_as_written():
    pipeline = read_pipeline(EXAMPLES / "oj_sales" / "pipeline.yml")
    partition, train = pipeline.nodes.values()
    assert (partition.name, partition.kind, train.name, train.kind) == (
        "partition_job",
        "command",
        "parallel_train",
        "parallel",
    )
    assert train.upstream == ("partition_job",)
    assert partition.job["inputs"]["data_source"]["type"] == "uri_file"
    assert partition.job["outputs"] == {"tabular_output_data": {"type": "mltable", "mode": "rw_mount"}}
    assert partition.job["code"] == str(EXAMPLES / "oj_sales" / "src" / "partition_data")


def test_an_mltable_may_drop_the_columns_its_paths_give(tmp_path):
    write(
        tmp_path,
        "MLTable",
        """
        paths: [{pattern: ./**/*.csv}]
        transformations:
          - read_delimited: {delimiter: ",", header: all_files_same_headers, include_path_column: true}
          - extract_columns_from_partition_format: {partition_format: "{Store}/{Brand}/{file_name}.{extension}"}
          - drop_columns: [Path, file_name, extension]
    """,
    )
    table = mltable_input(str(tmp_path), "inputs.data")
    assert (table["type"], table["partition_format"]) == ("tabular", "{Store}/{Brand}/*.*")
    write(
        tmp_path, "MLTable", "paths: [{pattern: ./*.csv}]\ntransformations: [read_delimited: {}, drop_columns: [x]]\n"
    )
    with pytest.raises(ConfigError, match="'x': only columns the paths give can be dropped here"):
        mltable_input(str(tmp_path), "inputs.data")


def test_engine_params_are_the_inputs_of_the_pipeline_and_its_jobs(pipeline_file, tmp_path):
    params = pipeline_params(read_pipeline(pipeline_file))
    assert params == {"raw": str(tmp_path / "data"), "threshold": 0.5}
    oj = pipeline_params(read_pipeline(EXAMPLES / "oj_sales" / "pipeline.yml"))
    assert oj["partition_job.partition_keys"] == "Store,Brand"
    assert oj["parallel_train.lagging_orders"] == "1,2,3,4,5,6"


@pytest.mark.parametrize(
    ("params", "opened", "inputs"),
    [
        (
            {"parallel_train.lagging_orders": "1,2,3", "mini_batch_size": 5},
            True,
            {"jobs.parallel_train.inputs.lagging_orders": "1,2,3"},
        ),
        ({"parallel_train.lagging_orders": None, "partition_job.partition_keys": "Store,Brand"}, True, {}),  # defaults
        (
            {"partition_job.partition_keys": "Store --out /etc"},
            ["partition_job.partition_keys"],
            {"jobs.partition_job.inputs.partition_keys": "Store --out /etc"},
        ),
    ],
)
def test_a_trigger_sets_plain_words_unless_the_author_opens_more(params, opened, inputs):
    assert trigger_inputs(read_pipeline(EXAMPLES / "oj_sales" / "pipeline.yml"), params, opened) == inputs


@pytest.mark.parametrize(
    ("params", "opened", "message"),
    [
        ({"partition_job.partition_keys": "Store; rm -rf /"}, True, "'Store; rm -rf /' is not a plain word"),
        ({"partition_job.partition_keys": "Store"}, False, "partition_job.partition_keys: 'Store'"),
    ],
)
def test_what_a_trigger_may_not_set_is_one_line_saying_how_to_open_it(params, opened, message):
    with pytest.raises(ConfigError) as error:
        trigger_inputs(read_pipeline(EXAMPLES / "oj_sales" / "pipeline.yml"), params, opened)
    assert message in str(error.value)
    assert "params_override=[" in str(error.value)


def test_a_trigger_may_not_choose_data(pipeline_file):
    with pytest.raises(ConfigError, match="raw: '/etc' chooses data"):
        trigger_inputs(read_pipeline(pipeline_file), {"raw": "/etc"}, True)
    assert trigger_inputs(read_pipeline(pipeline_file), {"raw": "/data/b"}, "all") == {"raw": "/data/b"}
