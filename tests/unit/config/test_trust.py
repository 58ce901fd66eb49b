"""Trigger-time input (config/trust.py): only the fields the author opens may change, and an unknown or
closed field is a one-line error naming it and saying how to open it."""

import pytest

from parallel_steps import ConfigError, ParallelRunConfig
from parallel_steps.config.trust import ALL, FIELDS, OVERRIDABLE, allowed_fields, trigger_overrides

HOW = "params_override=[{field!r}]"


def test_the_overridable_fields_change_neither_code_nor_environment_nor_paths():
    assert {"mini_batch_size", "error_threshold", "run_max_try", "allow_reuse", "logging_level"} <= OVERRIDABLE
    closed = {"entry_script", "source_directory", "inputs", "output", "environment_variables", "arguments"}
    closed |= {"side_inputs", "models", "run_root", "backend", "ray_address", "submit_to", "append_row_file_name"}
    assert not closed & OVERRIDABLE


def test_true_opens_the_overridable_fields_false_none_and_all_every_one():
    assert allowed_fields(True) == OVERRIDABLE
    assert allowed_fields(False) == frozenset()
    assert allowed_fields(None) == frozenset()
    assert allowed_fields(ALL) == frozenset(FIELDS)


def test_named_fields_open_exactly_those():
    assert allowed_fields("output") == {"output"}
    assert allowed_fields(["output", "inputs"]) == {"output", "inputs"}


def test_an_unknown_field_name_in_the_authors_list_is_refused():
    with pytest.raises(ConfigError, match="params_override: 'ouput' is not a configuration field"):
        allowed_fields(["ouput"])


def test_open_fields_become_overrides_and_none_values_are_not_given():
    params = {"mini_batch_size": "5", "error_threshold": None, "not_a_field": "x"}
    assert trigger_overrides(params, True, HOW) == {"mini_batch_size": "5"}


def test_a_closed_field_is_refused_naming_it_and_how_to_open_it():
    with pytest.raises(ConfigError) as caught:
        trigger_overrides({"entry_script": "evil.py"}, True, HOW)
    assert str(caught.value) == (
        "entry_script: may not be set by trigger-time input (it is not among the fields the author opened) "
        "(params_override=['entry_script'])"
    )


def test_with_params_override_false_params_are_not_read_at_all():
    assert trigger_overrides({"entry_script": "evil.py"}, False, HOW) == {}


def test_an_author_who_names_fields_opens_those_and_closes_the_rest():
    assert trigger_overrides({"output": "/tmp/o"}, ["output"], HOW) == {"output": "/tmp/o"}
    with pytest.raises(ConfigError, match="mini_batch_size: may not be set by trigger-time input"):
        trigger_overrides({"output": "/tmp/o", "mini_batch_size": 3}, ["output"], HOW)


def test_the_fields_are_the_models_in_order():
    assert list(FIELDS) == list(ParallelRunConfig.model_fields)
