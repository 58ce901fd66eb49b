"""What the engines publish about a step's data (Airflow Assets and OpenLineage, Prefect assets), computed in
the core: dataset names in OpenLineage's naming, Parquet schemas from the footer, a run's facts; the report
uploaded beside an output URL, and the only pages a server hands out; and how a Ray job picks the Python
that runs its driver."""

import os
import re
import shlex
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_steps import ParallelRunConfig, TabularDataset
from parallel_steps.jobs import ray_job_entry as job_entry
from parallel_steps.report import served_report
from parallel_steps.report.lineage import (
    input_locations,
    input_schemas,
    locate,
    output_location,
    run_facts,
    table_schema,
)
from parallel_steps.run.step import run_step

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("where", "uri", "namespace", "name"),
    [
        ("s3://bucket/scores/", "s3://bucket/scores", "s3://bucket", "scores"),
        ("s3a://bucket/a/b.parquet", "s3a://bucket/a/b.parquet", "s3://bucket", "a/b.parquet"),
        ("gs://b/x", "gs://b/x", "gs://b", "x"),
        (
            "abfss://data@acct.dfs.core.windows.net/out",
            "abfss://data@acct.dfs.core.windows.net/out",
            "abfss://data@acct.dfs.core.windows.net",
            "out",
        ),
        (
            "wasbs://data@acct.blob.core.windows.net/in/f.csv",
            "wasbs://data@acct.blob.core.windows.net/in/f.csv",
            "wasbs://data@acct.blob.core.windows.net",
            "in/f.csv",
        ),
        ("file:///srv/out/", "file:///srv/out", "file", "/srv/out"),
        ("hdfs://nn:8020/warehouse/t", "hdfs://nn:8020/warehouse/t", "hdfs://nn:8020", "/warehouse/t"),
    ],
)
def test_urls_get_openlineage_namespaces_and_names(where, uri, namespace, name):
    found = locate(where)
    assert (found.uri, found.namespace, found.name) == (uri, namespace, name)


def test_a_local_path_is_a_file_uri_of_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = locate("out/scores")
    assert (found.uri, found.namespace, found.name) == (
        f"file://{tmp_path}/out/scores",
        "file",
        f"{tmp_path}/out/scores",
    )


def test_fsspec_short_azure_urls_take_the_account_adlfs_uses(monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    assert locate("az://data/out").namespace == "abfss://data@acct.dfs.core.windows.net"
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME")
    assert (locate("abfs://data/out").namespace, locate("abfs://data/out").name) == ("abfss://data", "out")


def test_inputs_and_output_of_a_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ParallelRunConfig(inputs=["data/*.csv", "s3://b/more/", "data/other.csv"], output="s3://b/out")
    assert [location.uri for location in input_locations(config)] == [
        f"file://{tmp_path}/data",  # a glob is the folder it searches
        "s3://b/more",
        f"file://{tmp_path}/data/other.csv",
    ]
    assert output_location(config).uri == "s3://b/out"
    assert output_location(ParallelRunConfig()) is None  # the run directory's own: known only when it runs


def test_parquet_schemas_come_from_the_footer_of_the_first_file(tmp_path):
    folder = tmp_path / "tables"
    folder.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "text": ["a", "b"]}), folder / "a.parquet")
    pd.DataFrame({"id": [3]}).to_csv(folder / "b.csv", index=False)
    assert table_schema(str(folder)) == [("id", "int64"), ("text", "string")]
    assert table_schema(str(folder / "b.csv")) is None
    assert table_schema(str(tmp_path / "missing.parquet")) is None  # lineage never fails a run

    config = ParallelRunConfig(inputs=[TabularDataset(str(folder / "*.parquet"))])
    assert input_schemas(config) == {f"file://{folder}": [("id", "int64"), ("text", "string")]}


SCRIPT = """
def run(mini_batch):
    return [f"{path}" for path in mini_batch]
"""


def test_a_run_counts_the_rows_it_wrote_and_uploads_its_report_beside_an_output_url(tmp_path, make_files, write_script):
    make_files(5)
    write_script(SCRIPT)
    output = f"file://{tmp_path}/bucket/scores"
    config = ParallelRunConfig(entry_script="score.py", inputs=["data"], mini_batch_size=2, output=output)

    summary = run_step(config)

    uploaded = tmp_path / "bucket" / "scores"
    assert summary["report_url"] == f"{output}/report.html"
    assert (uploaded / "report.html").read_bytes() == Path(summary["report"]).read_bytes()
    assert (summary["rows_written"], summary["output_bytes"]) == (
        5,
        (uploaded / "parallel_run_step.txt").stat().st_size,
    )
    facts = run_facts(summary)
    assert facts == {
        "run_id": summary["run_id"],
        "status": "Succeeded",
        "reused": False,
        "rows_written": 5,
        "mini_batches_run": 3,
        "mini_batches_reused": 0,
        "mini_batches_failed": 0,
        "items_succeeded": 5,
        "items_failed": 0,
        "output_file": f"{output}/parallel_run_step.txt",
        "report": f"{output}/report.html",
    }

    elsewhere = run_step(config.with_overrides(output=f"file://{tmp_path}/bucket/copy"))
    assert elsewhere["reused"] is True
    assert elsewhere["rows_written"] == 5
    assert elsewhere["report_url"] == f"file://{tmp_path}/bucket/copy/report.html"
    assert (tmp_path / "bucket" / "copy" / "report.html").is_file()

    (uploaded / "report.html").unlink()
    off = run_step(config.with_overrides(upload_report=False, allow_reuse=False))
    assert off["report_url"] is None
    assert not (uploaded / "report.html").exists()


def test_the_job_entry_checks_every_dependency_of_the_project():
    """job_entry runs outside the project's environment, so it lists the imports itself: the modules of every
    dependency in pyproject.toml, and Ray (which `submit_to: ray_job` needs)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=\[ ;]", requirement)[0] for requirement in project["dependencies"]] + ["ray"]
    distributions = {dist.lower() for module in job_entry.REQUIRED for dist in packages_distributions()[module]}
    assert distributions == {name.lower() for name in names}


def test_the_job_finds_the_python_of_the_environment_whose_ray_it_loaded():
    import ray  # noqa: F401  (loads ray/_raylet.so into this process, as into a job's supervisor)

    python = job_entry.cluster_python(os.getpid())
    assert Path(python).parent == Path(sys.prefix) / "bin"
    assert job_entry.problem(python, named=False) is None  # this environment has every dependency


def test_the_job_entrypoint_quotes_what_it_is_given():
    command = job_entry.entrypoint("/runs/a b", "run-1", "/opt/ray env/bin/python")
    start = '"$(readlink /proc/$PPID/exe)" -m '
    assert command.startswith(start)
    assert shlex.split(command.removeprefix(start).replace("$PPID", "PID")) == [
        "parallel_steps.jobs.ray_job_entry",
        "/runs/a b",
        "run-1",
        "PID",
        "/opt/ray env/bin/python",
    ]


def test_a_server_hands_out_only_a_runs_report_page_under_the_run_root(tmp_path):
    root = tmp_path / "runs"
    page = root / "airflow" / "dag" / "task" / "run" / "-1" / "logs" / "report.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html></html>")
    (root / "airflow" / "dag" / "run.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("secret")
    outside = tmp_path / "elsewhere" / "logs"
    outside.mkdir(parents=True)
    (outside / "report.html").write_text("not a run of this root")
    (root / "link" / "logs").mkdir(parents=True)
    (root / "link" / "logs" / "report.html").symlink_to(outside / "report.html")

    assert served_report(str(page), root) == page
    assert served_report(f"{root}/airflow/dag/task/run/-1/logs/../logs/report.html", root) == page
    for refused in (
        None,
        "",
        str(root / "airflow" / "dag" / "run.json"),  # under the root, not a report
        f"{root}/../secret.txt",
        str(outside / "report.html"),  # a report page, of no run under the root
        str(root / "link" / "logs" / "report.html"),  # a link out of the root
        str(root / "gone" / "logs" / "report.html"),
        "/etc/passwd",
    ):
        assert served_report(refused, root) is None, refused
