"""The configuration: its field reference (one table, in the model's order), coercion of strings by each
field's type, the one unknown-field check, the checks carried by the field types, and the typed sections
each layer takes."""

import json
from pathlib import Path

import pytest

from parallel_steps import ConfigError, FileDataset, ParallelRunConfig, TabularDataset
from parallel_steps.config import check_fields, coerce, unknown_field
from parallel_steps.config.sections import OUTCOME_FIELDS, DriverPolicy, PlanSettings, PoolConfig, Thresholds

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_the_field_reference_is_unchanged_in_content_and_order():
    """Captured from the one-class model before the fields were split by section; a field added since goes in
    at its place."""
    expected = json.loads((FIXTURES / "config_fields.json").read_text())
    fields = ParallelRunConfig.model_fields
    actual = [
        [name, str(info.annotation), repr(info.get_default(call_default_factory=True)), info.description]
        for name, info in fields.items()
    ]
    assert actual == expected


# Strings, coerced by the field's type -------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [
        ("run_max_try", "5", 5),  # int
        ("allowed_failed_percent", "12.5", 12.5),  # float
        ("allow_reuse", "false", False),  # bool
        ("hang_detection", "true", True),
        ("backend", "ray", "ray"),  # Literal
        ("logging_level", "warn", "WARNING"),  # Literal with aliases
        ("mini_batch_size", "10", 10),  # int | str | None: a count
        ("mini_batch_size", "", None),
        ("worker_memory_limit", "4GB", "4GB"),  # a size
        ("process_count_per_node", "none", None),  # int | None
        ("shutdown_timeout", "null", None),  # float | None
        ("entry_script", "", None),  # str | None
        ("append_row_format", "None", None),  # Literal | None
        ("partition_keys", "store, brand", ["store", "brand"]),  # list | None: comma-separated
        ("partition_keys", '["store"]', ["store"]),  # ... or JSON
        ("partition_keys", "", None),
        ("retryable_errors", "", []),  # list: empty text is an empty list
        ("retryable_exit_codes", "[3, 4]", [3, 4]),
        ("retryable_exit_codes", "3,4", [3, 4]),
        ("arguments", "--alpha 1 --beta", ["--alpha", "1", "--beta"]),  # split like a command line
        ("arguments", '["--name", "a b"]', ["--name", "a b"]),
        ("environment_variables", "{MODE: fast}", {"MODE": "fast"}),  # dict: YAML flow syntax
        ("environment_variables", "", {}),
        ("side_inputs", '{"labels": "data/labels.csv"}', {"labels": "data/labels.csv"}),
    ],
)
def test_every_field_type_takes_its_value_as_text(field, text, value):
    config = ParallelRunConfig(name="coerce-test").with_overrides(**{field: text})
    assert getattr(config, field) == value


def test_inputs_from_text_are_comma_separated_paths_never_yaml():
    assert coerce("inputs", "a: b, c") == ["a: b", "c"]
    assert coerce("inputs", "data/images") == "data/images"
    config = ParallelRunConfig.from_dict({"inputs": "data/a,data/b"})
    assert [d.path for d in config.inputs] == [["data/a"], ["data/b"]]


def test_values_that_are_not_text_are_left_to_the_model():
    assert coerce("partition_keys", ["a"]) == ["a"]
    assert coerce("run_max_try", 3) == 3


def test_a_bad_value_names_its_field_and_what_works():
    with pytest.raises(ConfigError, match=r"^mini_batch_size: '10XB' is not a size \(use 1024, 512KB, 10MB, 1GB\)$"):
        ParallelRunConfig.from_dict({"mini_batch_size": "10XB"})
    with pytest.raises(ConfigError, match=r"^backend: 'k8s' is not one of 'local' or 'ray'$"):
        ParallelRunConfig.from_dict({"backend": "k8s"})
    with pytest.raises(ConfigError, match=r"^run_max_try: 'many' is not valid"):
        ParallelRunConfig.from_dict({"run_max_try": "many"})


# One unknown-field check --------------------------------------------------------------------------------


def test_an_unknown_field_is_one_line_naming_it_and_the_valid_ones():
    with pytest.raises(ConfigError) as caught:
        ParallelRunConfig.from_dict({"mini_batch_sise": 3, "zzz": 1})
    message = str(caught.value)
    assert message.startswith("mini_batch_sise: is not a configuration field (valid: name, entry_script,")
    assert caught.value.field == "mini_batch_sise"


def test_the_model_refuses_an_unknown_keyword_with_the_same_line():
    with pytest.raises(ConfigError) as direct:
        ParallelRunConfig(mini_batch_sise=3)
    assert str(direct.value) == str(unknown_field("mini_batch_sise"))


def test_the_check_takes_non_text_yaml_keys_and_says_whose_field_it_is():
    with pytest.raises(ConfigError, match=r"^1: is not a configuration field"):
        check_fields([1, "name"])
    with pytest.raises(ConfigError, match=r"^colour: is not a configuration field \(task 'score'\) \(valid: name,"):
        check_fields(["colour"], where="task 'score'")
    check_fields(["name", "inputs"])


def test_several_bad_fields_are_listed_on_one_line():
    with pytest.raises(ConfigError) as caught:
        ParallelRunConfig(run_max_try=0, node_count=0)
    assert str(caught.value).count("; ") == 1
    assert "run_max_try: " in str(caught.value)
    assert "node_count: " in str(caught.value)


# Checks carried by the field types -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Bad_Name"}, "name: 'Bad_Name' is not a valid step name"),
        ({"side_inputs": {"../up": "x"}}, "side_inputs: '../up' is not a valid name"),
        ({"models": {"a/b": "x"}}, "models: 'a/b' is not a valid name"),
        ({"side_inputs": True}, "side_inputs: True is not a mapping of NAME: PATH"),  # found by the CLI property test
        ({"read_ahead": "1 lorry"}, "read_ahead: '1 lorry' is not a size"),
        ({"workers_per_gpu": 17}, "workers_per_gpu: 17 is not valid"),
        ({"append_row_file_name": "out/x.txt"}, "append_row_file_name: 'out/x.txt' must be a file name"),
        ({"retryable_errors": ["("]}, "retryable_errors: '(' is not a valid regex"),
        ({"environment_variables": {"A=B": "1"}}, "environment_variables: 'A=B' is not a valid variable"),
        (
            {"inputs": [{"type": "files", "path": "x", "colour": 1}]},
            "inputs[0].colour: is not a field of a files input",
        ),
        ({"inputs": ["a", {"type": "tabular", "path": "b.csv"}]}, "inputs: mixes files and tabular datasets"),
    ],
)
def test_bad_values_are_refused_where_they_enter(fields, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace("[", r"\[")):
        ParallelRunConfig(**fields)


def test_values_are_normalised_by_their_type():
    config = ParallelRunConfig(
        side_inputs=["data/labels.csv"],
        arguments=["--n", 3],
        partition_keys="store",
        environment="my-env",
        compute_target={"name": "gpu-cluster", "secret": "x"},
        environment_variables={"N": 1},
    )
    assert config.side_inputs == {"labels.csv": "data/labels.csv"}
    assert config.arguments == ["--n", "3"]
    assert config.partition_keys == ["store"]
    assert config.compute_target == "gpu-cluster"  # an Azure object is kept as its name only
    assert config.environment_variables == {"N": "1"}
    assert config.ignored_fields == ["environment", "compute_target"]


# The sections each layer takes --------------------------------------------------------------------------


def test_plan_settings_carry_the_inputs_and_the_batch_size_by_input_type():
    files = ParallelRunConfig(inputs=["data"], partition_keys=None, reuse_fingerprint="content").plan_settings()
    assert files == PlanSettings([FileDataset("data")], 10, None, "content")
    tables = ParallelRunConfig(inputs=[TabularDataset("t.csv")], mini_batch_size="2KB").plan_settings()
    assert (tables.batch_size, tables.fingerprint) == (2048, "stat")


def test_thresholds_are_the_outcome_fields():
    config = ParallelRunConfig(error_threshold=5, allowed_failed_count=2, max_same_error=3)
    assert config.thresholds() == Thresholds(error_threshold=5, allowed_failed_count=2, max_same_error=3)
    assert OUTCOME_FIELDS == (
        "error_threshold",
        "mini_batch_error_threshold",
        "allowed_failed_count",
        "allowed_failed_percent",
        "max_tolerated_failure_rate",
        "max_same_error",
    )


def test_the_driver_policy_has_the_derived_progress_timeout():
    policy = ParallelRunConfig(run_invocation_timeout=10, retryable_errors=["quota"]).driver_policy()
    assert isinstance(policy, DriverPolicy)
    assert policy.progress_timeout == 3 * (10 + 30)
    assert (policy.run_max_try, policy.fault_tolerant_policy, policy.retryable_errors) == (3, "OnFailure", ("quota",))
    assert ParallelRunConfig(progress_update_timeout=7).driver_policy().progress_timeout == 7


def test_the_pool_config_has_the_limits_in_their_units():
    pool = ParallelRunConfig(worker_memory_limit="1KB", run_invocation_timeout=9, node_count=2).pool_config()
    assert pool == PoolConfig("local", None, 2, None, 1024, 9, 600)


def test_sections_are_frozen():
    with pytest.raises(AttributeError):
        ParallelRunConfig().thresholds().error_threshold = 3  # type: ignore[misc]


def test_a_job_file_and_a_step_file_both_load_through_from_yaml(tmp_path):
    (tmp_path / "step.yaml").write_text("name: from-step\ninputs: [data]\nentry_script: score.py\n")
    step = ParallelRunConfig.from_yaml(tmp_path / "step.yaml")
    assert (step.name, step.entry_script) == ("from-step", str(tmp_path / "score.py"))
    (tmp_path / "job.yml").write_text(
        "type: parallel\nname: from_job\ninputs:\n  data: {type: uri_folder, path: ./data}\n"
        "input_data: ${{inputs.data}}\ntask: {type: run_function, entry_script: score.py, code: .}\n"
    )
    job = ParallelRunConfig.from_yaml(tmp_path / "job.yml")
    assert job.name == "from-job"
    assert job.inputs[0].path == [str(tmp_path / "data")]
