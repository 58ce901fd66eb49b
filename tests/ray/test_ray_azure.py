"""The Azure ML samples of examples/azure on the Ray backend: the same ParallelRunConfigs as written for
Azure, on two Ray nodes; models reach every node's workers, run(mini_batch, mini_batch_context) gets its
context there, and the outputs equal the local backend's."""

import runpy
from pathlib import Path

import pytest
from support import folders, markers, output_lines, write_entry_script

from parallel_steps import FileDataset, ParallelRunConfig
from parallel_steps.run.step import run_step
from parallel_steps.worker.side_inputs import side_inputs_dir

SHAPES = ["mnist", "iris", "file_partitions", "oj_sales", "oj_sales_hive"]


@pytest.fixture(scope="module")
def samples(azure_examples):
    steps = runpy.run_path(str(azure_examples / "pipeline.py"))["STEPS"]
    return steps, runpy.run_path(str(azure_examples / "results.py"))["read_output"]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sample_runs_on_two_ray_nodes_as_on_the_local_backend(ray_cluster, samples, tmp_path, shape):
    steps, read_output = samples
    local = steps[shape](str(tmp_path / "local")).run()
    on_ray = steps[shape](str(tmp_path / "ray")).run(backend="ray", ray_address=ray_cluster.address, allow_reuse=False)

    assert (on_ray["status"], on_ray["config"]["backend"]) == ("Succeeded", "ray")
    ray_output = read_output(shape, on_ray["output_file"])
    local_output = read_output(shape, local["output_file"])
    columns = list(ray_output.columns)
    assert (
        ray_output.sort_values(columns)
        .reset_index(drop=True)
        .equals(local_output.sort_values(columns).reset_index(drop=True))
    )
    assert Path(on_ray["output_file"]).name == Path(local["output_file"]).name


def test_every_node_gets_the_models_and_run_gets_its_context(ray_cluster, tmp_path):
    """Each worker holds its mini-batch until a worker on each node has loaded the model, so both take part."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.txt").write_text("w7")
    for user, genre in [("u1", "rock"), ("u2", "jazz"), ("u3", "rock")]:
        (tmp_path / "music" / user).mkdir(parents=True)
        (tmp_path / "music" / user / f"{genre}.wav").write_bytes(b"x")
    write_entry_script(
        tmp_path,
        """
        from azureml.core import Model

        def init():
            global model
            model = Model.get_model_path("tagger")
            _write_marker(model=model)

        def run(mini_batch, mini_batch_context):
            _wait_for_markers(2)
            weights = open(os.path.join(model, "w.txt")).read()
            return [f"{mini_batch_context.partition_key_value['genre']} {len(mini_batch)} {weights}"]
    """,
    )
    config = ParallelRunConfig(
        entry_script=str(tmp_path / "score.py"),
        inputs=[FileDataset(str(tmp_path / "music"), partition_format="/{user}/{genre}.wav")],
        partition_keys=["genre"],
        models={"tagger": str(tmp_path / "model")},
        output=str(tmp_path / "out"),
        backend="ray",
        ray_address=ray_cluster.address,
        node_count=2,
        process_count_per_node=1,
        environment_variables=folders(tmp_path),
    )

    summary = run_step(config)

    assert output_lines(summary) == ["jazz 1 w7", "rock 2 w7"]
    seen = markers(tmp_path / "markers")
    assert sorted(seen) == ["node0-process000", "node1-process000"]
    for marker in seen.values():  # a node-local copy of the model, as for side inputs
        assert marker["model"].startswith(str(side_inputs_dir()))
        assert Path(marker["model"]).name == "model"
    assert not (side_inputs_dir() / Path(summary["run_dir"]).name).exists()  # removed from the nodes after the run
