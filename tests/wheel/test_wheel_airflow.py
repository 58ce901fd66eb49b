"""The installed wheel, Airflow environment: Airflow finds the provider, its connection type and its plugin
through their entry points, and a DAG with `ParallelRunOperator` and `@task.parallel_run` runs under
`airflow dags test` (a migrated SQLite home)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import parallel_steps

AIRFLOW = Path(sys.executable).with_name("airflow")

DAG_FILE = """
from pathlib import Path

from airflow.sdk import DAG, task

from parallel_steps.airflow import ParallelRunOperator

with DAG("wheel_smoke", schedule=None):
    words = ParallelRunOperator(
        task_id="count_words", entry_script="count_words.py", source_directory={scripts!r}, inputs={data!r},
        output={out!r} + "/words", mini_batch_size=2, process_count_per_node=2,
    )

    @task.parallel_run(inputs={data!r}, output={out!r} + "/sizes", mini_batch_size=3, process_count_per_node=1)
    def sizes(mini_batch):
        return [f"{{Path(p).name}} {{Path(p).stat().st_size}}" for p in mini_batch]

    words >> sizes()
"""

COUNT_WORDS = """
from pathlib import Path


def run(mini_batch):
    return [f"{Path(p).name} {len(Path(p).read_text().split())}" for p in mini_batch]
"""


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> dict[str, str]:
    """An Airflow home with a migrated SQLite database and a DAGs folder; the environment to run `airflow` in."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "dags").mkdir()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    airflow(env, "db", "migrate")
    return env


def airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(AIRFLOW), *args], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, (
        f"airflow {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )
    return result


def test_airflow_finds_the_provider_through_its_entry_point(airflow_home):
    listed = json.loads(airflow(airflow_home, "providers", "list", "--output", "json").stdout)
    versions = {provider["package_name"]: provider["version"] for provider in listed}
    assert versions.get("parallel-steps") == parallel_steps.__version__, versions


def test_airflow_loads_the_report_plugin_and_the_ray_connection_type_through_their_entry_points(airflow_home):
    env = {**airflow_home, "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    plugins = json.loads(airflow(env, "plugins", "--output", "json").stdout)
    (plugin,) = [plugin for plugin in plugins if plugin["name"] == "parallel_steps"]
    assert plugin["source"].startswith(f"parallel-steps=={parallel_steps.__version__}: EntryPoint(")
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/parallel-steps"]
    hooks = json.loads(airflow(env, "providers", "hooks", "--output", "json").stdout)
    (ray,) = [hook for hook in hooks if hook["connection_type"] == "ray_cluster"]
    assert (ray["class"], ray["package_name"]) == ("parallel_steps.airflow.hooks.RayClusterHook", "parallel-steps")


def test_a_dag_with_the_operator_and_the_decorator_runs(airflow_home, tmp_path):
    data, scripts, out = tmp_path / "data", tmp_path / "scripts", tmp_path / "out"
    data.mkdir()
    scripts.mkdir()
    for i in range(5):
        (data / f"doc{i}.txt").write_text("word " * i)
    (scripts / "count_words.py").write_text(COUNT_WORDS)
    dags = Path(airflow_home["AIRFLOW__CORE__DAGS_FOLDER"])
    (dags / "wheel_smoke.py").write_text(
        textwrap.dedent(DAG_FILE.format(data=str(data), scripts=str(scripts), out=str(out)))
    )
    airflow(airflow_home, "dags", "reserialize")

    airflow(airflow_home, "dags", "test", "wheel_smoke")

    assert sorted((out / "words" / "parallel_run_step.txt").read_text().splitlines()) == [
        f"doc{i}.txt {i}" for i in range(5)
    ]
    assert sorted((out / "sizes" / "parallel_run_step.txt").read_text().splitlines()) == [
        f"doc{i}.txt {5 * i}" for i in range(5)
    ]
