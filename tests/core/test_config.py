"""ParallelRunConfig: ParallelRunStep names and defaults, validation that names the field, overrides."""

import pytest

from parallel_steps import ConfigError, FileDataset, ParallelRunConfig, TabularDataset


def test_defaults_follow_parallel_run_step():
    config = ParallelRunConfig()
    assert config.error_threshold == -1
    assert config.mini_batch_error_threshold == -1
    assert config.allowed_failed_percent == 100
    assert config.output_action == "append_row"
    assert config.append_row_file_name == "parallel_run_step.txt"
    assert config.node_count == 1
    assert config.logging_level == "INFO"
    assert config.run_invocation_timeout == 60
    assert config.run_max_try == 3
    assert config.allow_reuse is True
    assert config.progress_timeout == 3 * (60 + 30)


def test_mini_batch_size_defaults_by_input_type():
    assert ParallelRunConfig(inputs=["data"]).batch_size == 10
    assert ParallelRunConfig(inputs=[TabularDataset("t.csv")]).batch_size == 1024 * 1024


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("512KB", 512 * 1024),
        ("10MB", 10 * 2**20),
        ("1GB", 2**30),
        ("1.5MB", int(1.5 * 2**20)),
    ],
)
def test_sizes(value, expected):
    assert ParallelRunConfig(inputs=[TabularDataset("t.csv")], mini_batch_size=value).batch_size == expected


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (dict(mini_batch_size="10XB"), "mini_batch_size", "'10XB' is not a size (use 1024, 512KB, 10MB, 1GB)"),
        (dict(name="Bad_Name"), "name", "not a valid step name"),
        (dict(name="ab"), "name", "not a valid step name"),
        (dict(name="a" * 33), "name", "not a valid step name"),
        (dict(node_count=0), "node_count", "greater than or equal to 1"),
        (dict(run_max_try=0), "run_max_try", "greater than or equal to 1"),
        (dict(error_threshold=-2), "error_threshold", "greater than or equal to -1"),
        (dict(allowed_failed_percent=101), "allowed_failed_percent", "less than or equal to 100"),
        (dict(backend="spark"), "backend", "'spark' is not one of 'local' or 'ray'"),
        (dict(output_action="append"), "output_action", "is not one of"),
        (dict(append_row_file_name="../out.txt"), "append_row_file_name", "must be a file name, without a folder"),
        (dict(append_row_format="xls"), "append_row_format", "'xls' is not one of 'text', 'csv', 'parquet' or 'jsonl'"),
        (dict(inputs=["data"], mini_batch_size="1MB"), "mini_batch_size", "is a size but the inputs are files"),
        (dict(inputs=["data"], partition_keys=["a"]), "partition_keys", "file input 0 has no partition_format"),
        (dict(retryable_errors=["(unclosed"]), "retryable_errors", "not a valid regex"),
        (dict(colour="blue"), "colour", "is not a configuration field"),
    ],
)
def test_invalid_values_name_the_field(fields, field, words):
    with pytest.raises(ConfigError) as error:
        ParallelRunConfig(**fields)
    message = str(error.value)
    assert message.startswith(f"{field}: "), message
    assert words in message
    assert "\n" not in message


def test_with_overrides_coerces_strings_from_templates_and_forms():
    base = ParallelRunConfig(inputs=["data"], entry_script="score.py")
    new = base.with_overrides(
        mini_batch_size="5",
        allow_reuse="false",
        run_invocation_timeout="2.5",
        retryable_errors='["reset", "refused"]',
        environment_variables='{"A": 1}',
        arguments="--model_dir models",
    )
    assert (new.mini_batch_size, new.allow_reuse, new.run_invocation_timeout) == (5, False, 2.5)
    assert new.retryable_errors == ["reset", "refused"]
    assert new.environment_variables == {"A": "1"}
    assert new.arguments == ["--model_dir", "models"]
    assert base.mini_batch_size is None, "the original is unchanged"
    assert new.inputs == [FileDataset("data")]


def test_with_overrides_validates():
    with pytest.raises(ConfigError, match=r"^process_count_per_node: "):
        ParallelRunConfig().with_overrides(process_count_per_node="zero")
    with pytest.raises(ConfigError, match=r"^mini_batch_sise: is not a configuration field .*mini_batch_size"):
        ParallelRunConfig().with_overrides(mini_batch_sise=5)


def test_yaml_step_file_paths_are_relative_to_the_file(tmp_path):
    folder = tmp_path / "step"
    folder.mkdir()
    (folder / "step.yaml").write_text(
        "name: score-digits\nentry_script: score.py\ninputs:\n  - {type: files, path: data/images}\n"
        "  - more\nside_inputs:\n  model: models/m\noutput: out\nmini_batch_size: 10\n"
    )
    config = ParallelRunConfig.from_yaml(folder / "step.yaml", mini_batch_size="4")
    assert config.entry_script == str(folder / "score.py")
    assert config.inputs == [FileDataset(str(folder / "data/images")), FileDataset(str(folder / "more"))]
    assert config.side_inputs == {"model": str(folder / "models/m")}
    assert config.output == str(folder / "out")
    assert config.mini_batch_size == 4


def test_yaml_unknown_key_lists_valid_names(tmp_path):
    (tmp_path / "step.yaml").write_text("entry_script: s.py\nmini_batch_sizes: 3\n")
    with pytest.raises(ConfigError) as error:
        ParallelRunConfig.from_yaml(tmp_path / "step.yaml")
    assert str(error.value).startswith("mini_batch_sizes: is not a configuration field (valid: name, entry_script")


def test_json_schema_is_available_for_forms():
    schema = ParallelRunConfig.model_json_schema()
    assert "Files per mini-batch" in schema["properties"]["mini_batch_size"]["description"]
