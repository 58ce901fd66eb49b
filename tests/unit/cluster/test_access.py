"""A step put on the cluster an engine's connection or block names: the address set, or one line naming the
conflict (another address in the step, a step that does not run on Ray)."""

from __future__ import annotations

import pytest

from parallel_steps import ConfigError, ParallelRunConfig
from parallel_steps.cluster.access import on_cluster

ADDRESS = "https://head.internal:8265"


def config(**fields: object) -> ParallelRunConfig:
    return ParallelRunConfig(entry_script="score.py", inputs=["/in"], **fields)  # type: ignore[arg-type]


def test_a_ray_step_gets_the_clusters_address() -> None:
    placed = on_cluster(config(backend="ray"), ADDRESS, "ray_cluster", "ray_cluster", "the block")
    assert placed.ray_address == ADDRESS


def test_the_same_address_in_the_step_is_no_conflict() -> None:
    placed = on_cluster(config(backend="ray", ray_address=ADDRESS), ADDRESS, "ray_cluster", "ray_cluster", "the block")
    assert placed.ray_address == ADDRESS


def test_another_address_in_the_step_names_both_places() -> None:
    with pytest.raises(ConfigError) as error:
        on_cluster(
            config(backend="ray", ray_address="other:6379"),
            ADDRESS,
            "ray_conn_id",
            "ray_conn_id 'prod'",
            "the connection",
        )
    assert str(error.value) == (
        f"ray_address: is set and ray_conn_id 'prod' names another cluster ({ADDRESS}) "
        "(name the cluster in one place: the connection)"
    )


def test_a_local_step_is_refused_naming_the_engines_field() -> None:
    with pytest.raises(ConfigError) as error:
        on_cluster(config(), ADDRESS, "ray_cluster", "ray_cluster", "the block")
    assert error.value.field == "ray_cluster"
    assert "set backend=ray" in str(error.value)
