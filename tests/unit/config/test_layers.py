"""A step's config from its layers: base < fields < trigger overrides, None leaves a field, one validation
of the merged result; the trigger layer is what `overrides.trigger_overrides` let through."""

from __future__ import annotations

from pathlib import Path

import pytest

from parallel_steps import ConfigError, InputError, ParallelRunConfig
from parallel_steps.config.layers import layered_config
from parallel_steps.config.trust import trigger_overrides

BASE = dict(entry_script="score.py", inputs=["data"], mini_batch_size=10, error_threshold=3)


@pytest.mark.parametrize("base", [ParallelRunConfig(**BASE), BASE], ids=["config", "dict"])
def test_fields_override_the_base_and_the_trigger_overrides_both(base):
    config = layered_config(base, {"mini_batch_size": 5, "error_threshold": 7}, {"mini_batch_size": 2})
    assert (config.mini_batch_size, config.error_threshold, config.entry_script) == (2, 7, "score.py")


def test_none_leaves_a_field_as_the_layer_below_set_it():
    config = layered_config(BASE, {"mini_batch_size": None, "error_threshold": 5}, {"error_threshold": None})
    assert (config.mini_batch_size, config.error_threshold) == (10, 5)


def test_strings_from_forms_and_templates_are_coerced():
    config = layered_config(BASE, {"mini_batch_size": "5", "allow_reuse": "false"})
    assert (config.mini_batch_size, config.allow_reuse) == (5, False)


def test_without_a_base_the_fields_are_the_config():
    assert layered_config(None, {"inputs": ["a"], "name": "only-fields"}).name == "only-fields"


def test_a_step_file_base_resolves_its_paths_against_its_folder(tmp_path: Path):
    step = tmp_path / "steps" / "step.yaml"
    step.parent.mkdir()
    step.write_text("entry_script: score.py\ninputs: [data]\nmini_batch_size: 4\n")
    config = layered_config(step, {"mini_batch_size": 8})
    assert config.mini_batch_size == 8
    assert Path(config.entry_script) == tmp_path / "steps" / "score.py"


def test_the_layers_are_merged_before_the_one_validation(tmp_path: Path):
    """A rule across fields sees the result: the file asks for a Ray job, the fields give the backend."""
    step = tmp_path / "step.yaml"
    step.write_text("entry_script: score.py\ninputs: [data]\nsubmit_to: ray_job\n")
    assert layered_config(step, {"backend": "ray"}).submit_to == "ray_job"
    with pytest.raises(ConfigError, match=r"^submit_to: 'ray_job' runs the driver on a Ray cluster"):
        layered_config(step)


def test_the_fallback_name_applies_only_when_no_layer_names_the_step():
    assert layered_config(BASE, name="score-digits").name == "score-digits"
    assert layered_config({**BASE, "name": "given"}, name="score-digits").name == "given"
    assert layered_config(BASE, {"name": "keyword"}, name="score-digits").name == "keyword"


def test_an_invalid_field_is_one_line_naming_it():
    with pytest.raises(ConfigError, match=r"^mini_batch_size: 'lots' is not a size"):
        layered_config(BASE, {"mini_batch_size": "lots"})
    with pytest.raises(ConfigError, match=r"^batch: is not a configuration field"):
        layered_config(BASE, {"batch": 1})


def test_a_missing_step_file_is_an_input_error(tmp_path: Path):
    with pytest.raises(InputError):
        layered_config(tmp_path / "nowhere.yaml")


def test_a_base_of_another_type_is_named():
    with pytest.raises(ConfigError, match=r"^parallel_run_config: expected a ParallelRunConfig"):
        layered_config(42)  # type: ignore[arg-type]


def test_trigger_input_outside_what_the_author_opened_never_reaches_the_layers():
    allowed = trigger_overrides({"mini_batch_size": "3", "logging_level": None}, True, "open {field}")
    assert layered_config(BASE, {"mini_batch_size": 5}, allowed).mini_batch_size == 3
    with pytest.raises(ConfigError, match=r"^entry_script: may not be set by trigger-time input"):
        trigger_overrides({"entry_script": "evil.py"}, True, "open {field}")
