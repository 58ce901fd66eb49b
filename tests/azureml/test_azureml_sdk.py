"""Entry scripts in an environment that has Azure ML's own SDK (`azureml-core`), as every ParallelRunStep
environment had: the real `Model.get_model_path` finds the step's models, the real `Run.get_context()`
logs to the run's metrics, and a failed init() is summed up by the SDK exception's type and message.

Run in the `azureml` environment (scripts/test-all); the examples of examples/azure run there too."""

import json
from pathlib import Path

import pytest

from parallel_steps import ParallelRunConfig, StepFailed
from parallel_steps.run.step import run_step

SCRIPT = """
import os
import azureml.core
from azureml.core import Model, Run

def init():
    global found
    found = {name: open(os.path.join(Model.get_model_path(name), "weights.txt") if name == "folder" else
             Model.get_model_path(name)).read() for name in ("folder", "file")}
    Run.get_context().log("models", len(found), description="loaded in init()")

def run(mini_batch):
    Run.get_context().log_row("mini_batch", files=len(mini_batch))
    return [f"{azureml.core.__file__} {sorted(found.items())} {os.environ['AZUREML_MODEL_DIR']}"]
"""


def config(**fields):
    return ParallelRunConfig(entry_script="score.py", inputs=["data"], output="out", process_count_per_node=1, **fields)


@pytest.fixture
def models(tmp_path):
    (tmp_path / "models" / "folder").mkdir(parents=True)
    (tmp_path / "models" / "folder" / "weights.txt").write_text("w")
    (tmp_path / "models" / "file.pkl").write_text("f")
    return {"folder": str(tmp_path / "models" / "folder"), "file": str(tmp_path / "models" / "file.pkl")}


def test_the_real_sdk_finds_the_models_and_logs_to_the_run(make_files, write_script, models):
    make_files(4)
    write_script(SCRIPT)
    summary = run_step(config(mini_batch_size=2, models=models))
    lines = Path(summary["output_file"]).read_text().splitlines()
    assert len(lines) == 2
    sdk, rest = lines[0].split(" ", 1)
    loaded, model_dir = rest.rsplit(" ", 1)
    assert "site-packages" in sdk  # Azure ML's SDK, not the shim
    assert loaded == "[('file', 'f'), ('folder', 'w')]"
    assert model_dir.endswith("azureml-models")  # two models: the folder of all of them, as on Azure
    metrics = Path(summary["run_dir"], "logs", "user", "metrics", "node0", "process000.jsonl")
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert summary["metrics_logged"] == len(records) == 3
    assert [(r["kind"], r["name"], r["value"]) for r in records] == [
        ("log", "models", 2),
        ("log_row", "mini_batch", {"files": 2}),
        ("log_row", "mini_batch", {"files": 2}),
    ]
    assert all(r["run"].startswith("OfflineRun_") for r in records)  # the SDK's offline run


def test_one_model_is_azureml_model_dir_itself(make_files, write_script, models):
    make_files(1)
    write_script(
        "import os\nfrom azureml.core import Model\n"
        "def run(mini_batch):\n"
        "    return [os.listdir(os.environ['AZUREML_MODEL_DIR']), os.listdir(Model.get_model_path('folder', version=1))]\n"
    )
    summary = run_step(config(models={"folder": models["folder"]}))
    assert Path(summary["output_file"]).read_text().splitlines() == [
        "['folder']",  # azureml-models/folder/1/folder
        "['weights.txt']",  # the model's own folder
    ]


def test_an_sdk_error_in_init_is_summed_up_by_its_type_and_message(make_files, write_script):
    make_files(1)
    write_script(
        "from azureml.core import Model\n"
        "def init():\n    Model.get_model_path('mnist')\n"
        "def run(mini_batch):\n    return mini_batch\n"
    )
    with pytest.raises(StepFailed) as failed:
        run_step(config())
    summary = failed.value.summary
    assert "ModelNotFoundException: Model mnist not found in cache" in summary["status_reason"]
    assert "Last error: }" not in summary["status_reason"]
    assert "ModelNotFoundException: Model mnist not found" in Path(summary["job_result"]).read_text()
