"""What a parallel step task declares when its DAG is parsed: its output as an outlet Asset and its inputs as
inlets, the "Run report" extra link, and how a `ray_cluster` connection describes a cluster."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG, Asset, task

from parallel_steps import ConfigError, ParallelRunConfig
from parallel_steps.airflow import ParallelRunOperator
from parallel_steps.airflow.hooks import RayClusterHook, cluster_of
from parallel_steps.airflow.links import report_path


def step(**fields) -> ParallelRunOperator:
    return ParallelRunOperator(task_id=fields.pop("task_id", "score"), entry_script="score.py", **fields)


class TestAssets:
    def test_the_output_folder_or_url_is_the_outlet_and_the_inputs_are_inlets(self, tmp_path):
        with DAG("assets", schedule=None):
            local = step(
                task_id="local", inputs=[str(tmp_path / "in"), "s3://b/raw/*.csv"], output=str(tmp_path / "out")
            )
            remote = step(task_id="remote", inputs="data", output="abfss://lake@acct.dfs.core.windows.net/scores/")
        assert local.outlets == [Asset(uri=(tmp_path / "out").as_uri())]
        assert local.inlets == [Asset(uri=(tmp_path / "in").as_uri()), Asset(uri="s3://b/raw")]
        assert remote.outlets == [Asset(uri="abfss://lake@acct.dfs.core.windows.net/scores")]

    def test_without_an_output_the_outlet_is_the_tasks_folder_of_runs(self, tmp_path, monkeypatch):
        monkeypatch.setenv("PARALLEL_STEPS_HOME", str(tmp_path / "runs"))
        with DAG("daily", schedule=None):
            scored = step(inputs="data")
        assert scored.outlets == [Asset(uri=(tmp_path / "runs" / "airflow" / "daily" / "score").as_uri())]

    def test_the_authors_outlets_replace_it_and_none_is_none(self):
        mine = Asset("s3://lake/scores")
        with DAG("named", schedule=None):
            named = step(task_id="named", inputs="data", output="out", outlets=[mine], inlets=[])
            off = step(task_id="off", inputs="data", output="out", outlets=[])
        assert (named.outlets, named.inlets) == ([mine], [])
        assert off.outlets == []

    def test_a_templated_output_or_input_declares_nothing(self):
        with DAG("templated", schedule=None):
            templated = step(inputs="{{ params.data }}", output="{{ params.out }}")
        assert (templated.outlets, templated.inlets) == ([], [])

    def test_a_mapped_step_declares_its_output_only_when_partial_sets_it(self):
        with DAG("mapped", schedule=None):
            fixed = step_partial(task_id="fixed", output="s3://lake/all").expand(inputs=[["a"], ["b"]])
            mapped = step_partial(task_id="mapped").expand(output=["s3://lake/a", "s3://lake/b"])
        assert fixed.partial_kwargs["outlets"] == [Asset(uri="s3://lake/all")]
        assert not mapped.partial_kwargs.get("outlets")

    def test_the_decorator_declares_them_too(self):
        with DAG("decorated", schedule=None):

            @task.parallel_run(inputs="data", output="s3://lake/decorated")
            def score(mini_batch):
                return mini_batch

            scored = score()
        assert scored.operator.outlets == [Asset(uri="s3://lake/decorated")]


def step_partial(**fields):
    return ParallelRunOperator.partial(entry_script="score.py", **fields)


def test_every_step_has_the_run_report_link_naming_its_task_instance_only():
    assert [link.name for link in step(inputs="data").operator_extra_links] == ["Run report"]
    assert report_path("my_dag", "manual__2026-12-01T10:00:00+00:00", "score") == (
        "/parallel-steps/reports/my_dag/manual__2026-12-01T10%3A00%3A00%2B00%3A00/score"
    )
    assert report_path("d", "r", "t", 3) == "/parallel-steps/reports/d/r/t?map_index=3"


class TestConnection:
    @pytest.mark.parametrize(
        ("host", "port", "scheme", "address"),
        [
            ("head", 8265, "http", "http://head:8265"),
            ("head", None, "https", "https://head:8265"),
            ("head", None, "", "head:6379"),
            ("head", 7000, None, "head:7000"),
            ("https://head:9000", None, None, "https://head:9000"),
        ],
    )
    def test_host_port_and_scheme_name_the_jobs_api_or_the_gcs(self, host, port, scheme, address):
        found, access = cluster_of(host, port, scheme, "tok", {})
        assert (found, access.token, access.verify) == (address, "tok", True)

    def test_tls_options_come_from_the_extra(self):
        assert cluster_of("h", None, "https", None, {"verify": "false"})[1].verify is False
        assert cluster_of("h", None, "https", None, {"ca_bundle": "/ca.pem"})[1].verify == "/ca.pem"
        with pytest.raises(ConfigError, match=r"^ray_conn_id: extra 'verify': 3 is not true or false"):
            cluster_of("h", None, "https", None, {"verify": 3})

    def test_a_connection_without_host_or_with_another_scheme_is_one_line(self):
        with pytest.raises(ConfigError, match=r"^ray_conn_id: the connection has no host"):
            cluster_of(None, None, "http", None, {})
        with pytest.raises(ConfigError, match=r"^ray_conn_id: scheme 'ray\+ssh' is not one the connection takes"):
            cluster_of("h", None, "ray+ssh", None, {})

    def test_the_step_takes_the_connections_address_and_refuses_a_second_one(self, monkeypatch):
        connection = '{"conn_type": "ray_cluster", "host": "head", "port": 8265, "schema": "http", "password": "t"}'
        monkeypatch.setenv("AIRFLOW_CONN_RAY_UNIT", connection)
        hook = RayClusterHook("ray_unit")
        assert hook.use(ParallelRunConfig(backend="ray")).ray_address == "http://head:8265"
        with pytest.raises(ConfigError, match=r"^ray_address: is set and ray_conn_id 'ray_unit' names another"):
            hook.use(ParallelRunConfig(backend="ray", ray_address="other:6379"))
        with pytest.raises(
            ConfigError, match=r"^ray_conn_id: names a Ray cluster but the step runs on backend 'local'"
        ):
            hook.use(ParallelRunConfig())
