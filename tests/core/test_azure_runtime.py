"""Entry scripts written for ParallelRunStep, inside the workers: `run(mini_batch, mini_batch_context)`, the
`azureml.core` shim (`Model.get_model_path`, `Run.get_context`), v1 ParallelRunConfig fields, and the
`append_row` output as ParallelRunStep writes it."""

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from parallel_steps import FileDataset, ParallelRunConfig, StepFailed, TabularDataset
from parallel_steps.run.step import run_step


def step(**fields):
    fields.setdefault("entry_script", "score.py")
    fields.setdefault("inputs", ["data"])
    fields.setdefault("process_count_per_node", 1)
    fields.setdefault("output", "out")
    return ParallelRunConfig(**fields)


def output(name: str = "parallel_run_step.txt") -> list[str]:
    return Path("out", name).read_text().splitlines()


class TestMiniBatchContext:
    def test_run_with_a_second_parameter_gets_the_mini_batch_context(self, make_files, write_script):
        make_files(5)
        write_script("""
            import os
            def run(mini_batch, mini_batch_context):
                listed = mini_batch_context.dataset.to_path()
                assert listed == mini_batch, (listed, mini_batch)
                key = mini_batch_context.partition_key_value
                return [f"{mini_batch_context.minibatch_index} {key} {os.path.basename(p)}" for p in mini_batch]
        """)
        run_step(step(mini_batch_size=2))
        assert output() == ["0 {} f0000.txt", "0 {} f0001.txt", "1 {} f0002.txt", "1 {} f0003.txt", "2 {} f0004.txt"]

    def test_files_partitioned_by_folder_give_their_key_values(self, tmp_path, write_script):
        for user, genre in [("u1", "rock"), ("u1", "jazz"), ("u2", "rock"), ("u2", "rock")]:
            folder = tmp_path / "music" / user / genre
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{len(list(folder.iterdir()))}.wav").write_bytes(b"x")
        write_script("""
            def run(mini_batch, context):
                return [f"{context.partition_key_value} {len(mini_batch)}"]
        """)
        dataset = FileDataset(str(tmp_path / "music"), partition_format="/{user}/{genre}/*.wav")
        summary = run_step(step(inputs=[dataset], partition_keys=["user", "genre"]))
        assert summary["mini_batches_total"] == 3
        assert output() == [
            "{'user': 'u1', 'genre': 'jazz'} 1",
            "{'user': 'u1', 'genre': 'rock'} 1",
            "{'user': 'u2', 'genre': 'rock'} 2",  # the 2 files of u2/rock: one mini-batch, one returned line
        ]
        # one item returned no result: with error_threshold -1 (the default) not a failure, counted apart
        assert (summary["items_succeeded"], summary["items_failed"], summary["items_without_result"]) == (3, 0, 1)

    def test_a_partitioned_table_has_its_keys_last_and_its_dataset_loads_the_same_rows(self, tmp_path, write_script):
        frame = pd.DataFrame({"Store": [1, 2, 1, 2], "x": [1.5, 2.5, 3.5, 4.5], "Brand": list("aabb"), "y": range(4)})
        frame.to_csv(tmp_path / "sales.csv", index=False)
        write_script("""
            def run(mini_batch, *context):
                again = context[0].dataset.to_pandas_dataframe()
                assert again.equals(mini_batch), (again, mini_batch)
                mini_batch["columns"] = "|".join(mini_batch.columns)
                mini_batch["key"] = str(context[0].partition_key_value)
                return mini_batch
        """)
        run_step(step(inputs=[TabularDataset("sales.csv")], partition_keys=["Brand", "Store"]))
        assert output() == [
            "1.5 0 a 1 x|y|Brand|Store \"{'Brand': 'a', 'Store': 1}\"",
            "2.5 1 a 2 x|y|Brand|Store \"{'Brand': 'a', 'Store': 2}\"",
            "3.5 2 b 1 x|y|Brand|Store \"{'Brand': 'b', 'Store': 1}\"",
            "4.5 3 b 2 x|y|Brand|Store \"{'Brand': 'b', 'Store': 2}\"",
        ]

    def test_hive_folders_are_columns_after_the_files_own(self, tmp_path, write_script):
        for store, brand in [(1, "a"), (2, "b")]:
            folder = tmp_path / "sales" / f"Store={store}" / f"Brand={brand}"
            folder.mkdir(parents=True)
            pd.DataFrame({"x": [store * 10, store * 10 + 1]}).to_parquet(folder / "part-0.parquet")
        write_script("""
            def run(mini_batch):
                mini_batch["types"] = "|".join(f"{c}:{t}" for c, t in mini_batch.dtypes.items())
                return mini_batch
        """)
        run_step(step(inputs=[TabularDataset("sales")]))
        types = "x:int64|Store:int64|Brand:str"
        assert output() == [f"10 1 a {types}", f"11 1 a {types}", f"20 2 b {types}", f"21 2 b {types}"]


class TestAzuremlCore:
    SCRIPT = """
        import os
        from azureml.core import Model
        from azureml.core.model import Model as SameModel

        def init():
            global paths
            paths = [Model.get_model_path("folder-model"), SameModel.get_model_path("file_model", version=3)]

        def run(mini_batch):
            return [f"{os.path.basename(p)} {open(os.path.join(p, 'w.txt') if os.path.isdir(p) else p).read()}"
                    for p in paths]
    """

    def test_get_model_path_gives_the_local_path_of_a_declared_model(self, tmp_path, make_files, write_script):
        make_files(1)
        (tmp_path / "models" / "digits").mkdir(parents=True)
        (tmp_path / "models" / "digits" / "w.txt").write_text("folder weights")
        (tmp_path / "models" / "iris.pkl").write_text("file weights")
        write_script(self.SCRIPT)
        models = {"folder-model": "models/digits", "file_model": (tmp_path / "models" / "iris.pkl").as_uri()}
        summary = run_step(step(models=models))
        assert output() == ["digits folder weights", "iris.pkl file weights"]  # the URL's model: a local copy
        assert summary["config"]["models"] == models

    def test_an_undeclared_model_fails_init_naming_it_and_the_declared_ones(self, tmp_path, make_files, write_script):
        make_files(1)
        (tmp_path / "m.pkl").write_text("w")
        write_script(
            "from azureml.core import Model\ndef init():\n    Model.get_model_path('mnist')\n"
            "def run(mini_batch):\n    return mini_batch\n"
        )
        with pytest.raises(StepFailed) as failed:
            run_step(step(models={"iris": "m.pkl"}))
        assert "ModelNotFoundError: model 'mnist' is not declared by the step (declared: iris)" in str(failed.value)

    def test_a_missing_model_is_a_user_error_before_anything_runs(self, make_files, write_script):
        make_files(1)
        write_script("def run(mini_batch):\n    return mini_batch\n")
        with pytest.raises(Exception, match=r"nope\.pkl: model 'iris' not found"):
            run_step(step(models={"iris": "nope.pkl"}))
        assert not Path("out").exists()

    @pytest.mark.parametrize(
        ("statement", "message"),
        [
            ("from azureml.core import Workspace", "ImportError: azureml.core.Workspace is not provided"),
            ("import azureml.pipeline.steps", "ModuleNotFoundError: azureml.pipeline is not provided"),
            (
                "from azureml.core import Run; Run.get_context().upload_file('a', 'b')",
                "azureml.core.Run.upload_file is not provided",
            ),
        ],
    )
    def test_anything_else_of_azureml_fails_with_one_line_naming_it(self, make_files, write_script, statement, message):
        make_files(1)
        write_script(f"def init():\n    {statement}\ndef run(mini_batch):\n    return mini_batch\n")
        with pytest.raises(StepFailed) as failed:
            run_step(step(run_max_try=1))
        assert message in str(failed.value)
        assert "install the Azure ML SDK for the rest" in str(failed.value)

    def test_the_real_sdk_wins_where_it_is_installed(self, tmp_path, make_files, write_script):
        make_files(1)
        package = tmp_path / "site" / "azureml" / "core"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            "class Model:\n    get_model_path = staticmethod(lambda name: 'real ' + name)\n"
        )
        write_script("from azureml.core import Model\ndef run(mini_batch):\n    return [Model.get_model_path('m')]\n")
        run_step(step(environment_variables={"PYTHONPATH": str(tmp_path / "site")}))
        assert output() == ["real m"]

    def test_run_log_calls_go_to_the_run_logs_and_are_counted(self, make_files, write_script):
        make_files(4)
        write_script("""
            from azureml.core import Run
            run_context = Run.get_context()
            def init():
                run_context.log("model", "v1", description="the model")
            def run(mini_batch):
                run_context.log_row("mini_batch", files=len(mini_batch))
                run_context.log_list("sizes", (1, 2))
                return mini_batch
        """)
        summary = run_step(step(mini_batch_size=2))
        metrics = Path(summary["run_dir"], "logs", "user", "metrics", "node0", "process000.jsonl")
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert summary["metrics_logged"] == len(records) == 1 + 2 * 2
        assert [(r["kind"], r["name"], r["value"]) for r in records] == [
            ("log", "model", "v1"),
            ("log_row", "mini_batch", {"files": 2}),
            ("log_list", "sizes", [1, 2]),
            ("log_row", "mini_batch", {"files": 2}),
            ("log_list", "sizes", [1, 2]),
        ]
        assert records[0]["description"] == "the model"


class TestParallelRunConfigFields:
    def test_environment_and_compute_target_are_accepted_kept_and_said_to_have_no_effect(
        self, make_files, write_script
    ):
        make_files(2)
        write_script("def run(mini_batch):\n    return mini_batch\n")
        config = step(
            environment=SimpleNamespace(name="batch_environment"),  # an azureml Environment object: its name
            compute_target="cpu-cluster",
            description="score the images",
        )
        summary = run_step(config)
        assert {k: summary["config"][k] for k in ("environment", "compute_target", "description")} == {
            "environment": "batch_environment",
            "compute_target": "cpu-cluster",
            "description": "score the images",
        }
        log = Path(summary["run_dir"], "logs", "sys", "master_role.txt").read_text()
        notes = [line for line in log.splitlines() if "no effect here" in line]
        assert len(notes) == 1
        assert notes[0].endswith(
            "INFO environment, compute_target, description: accepted as ParallelRunConfig takes them, no effect here"
        )

    def test_allowed_failed_count_is_a_threshold_of_failed_mini_batches(self, make_files, write_script):
        make_files(6)
        write_script(
            "def run(mini_batch):\n    if mini_batch[0].endswith(('0.txt', '2.txt')):\n        raise ValueError('bad')\n    return mini_batch\n"
        )
        summary = run_step(step(mini_batch_size=1, run_max_try=1, allowed_failed_count=2))
        assert (summary["status"], summary["mini_batches_failed"]) == ("Succeeded", 2)
        with pytest.raises(StepFailed, match="allowed_failed_count 1 exceeded: 2 mini-batches failed"):
            run_step(step(mini_batch_size=1, run_max_try=1, allowed_failed_count=1, allow_reuse=False))

    def test_an_environment_definition_is_kept_as_its_name_only(self):
        definition = {"name": "batch_environment", "docker": {"base_image_registry": {"password": "secret"}}}
        assert ParallelRunConfig(environment=definition).environment == "batch_environment"

    def test_logging_level_takes_pythons_names(self):
        assert ParallelRunConfig(logging_level="WARN").logging_level == "WARNING"
        assert ParallelRunConfig(logging_level="fatal").logging_level == "CRITICAL"


class TestOutput:
    def test_a_table_is_written_as_parallel_run_step_writes_it_whatever_the_file_name(self, tmp_path, write_script):
        frame = pd.DataFrame({"day": ["1990-06-14", "1990-06-21"], "name": ["a b", "c"], "x": [0.5, None]})
        frame.to_csv(tmp_path / "t.csv", index=False)
        write_script("import pandas as pd\ndef run(df):\n    df['day'] = pd.to_datetime(df['day'])\n    return df\n")
        for name in ("results.out", "results.csv"):
            summary = run_step(step(inputs=[TabularDataset("t.csv")], append_row_file_name=name, allow_reuse=False))
            assert (Path(summary["output_file"]).name, summary["append_row_format"]) == (name, "text")
            assert output(name) == ['1990-06-14 "a b" 0.5', "1990-06-21 c "]
            back = pd.read_csv(summary["output_file"], delimiter=" ", header=None)
            back.columns = ["day", "name", "x"]
            assert back["name"].tolist() == ["a b", "c"]

    def test_elements_are_written_with_str(self, make_files, write_script):
        make_files(2)
        write_script("def run(mini_batch):\n    return [(p[-5], {'n': 1}) for p in mini_batch]\n")
        run_step(step())
        assert output() == ["('0', {'n': 1})", "('1', {'n': 1})"]

    def test_append_row_dataframe_header_writes_one_header_line_on_top(self, tmp_path, write_script):
        pd.DataFrame({"sepal length": [5.1, 4.9, 4.7, 4.6], "variety": ["a", "b", "c", "d"]}).to_csv(
            tmp_path / "t.csv", index=False
        )
        write_script("def run(df):\n    return df\n")
        arguments = ["--append_row_dataframe_header", True]  # as a v1 ParallelRunStep passes it
        summary = run_step(step(inputs=[TabularDataset("t.csv")], mini_batch_size=20, arguments=arguments))
        assert summary["mini_batches_total"] > 1  # several slices, one header
        assert output() == ['"sepal length" variety', "5.1 a", "4.9 b", "4.7 c", "4.6 d"]
        assert pd.read_csv(summary["output_file"], delimiter=" ")["sepal length"].tolist() == [5.1, 4.9, 4.7, 4.6]
