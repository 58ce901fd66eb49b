"""An S3 store as a step sees it, through a proxy in front of moto's server (tests/storage_servers.py): what
requests a run makes (one listing, one GET per object, range requests for tables), its secrets, and the
faults object stores have (throttling, the service restarting, an upload that fails)."""

import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_steps import ParallelRunConfig
from parallel_steps.errors import StepFailed
from parallel_steps.jobs import submit
from parallel_steps.run.step import run_step
from storage_servers import FaultProxy, Store, s3_store

from .conftest import cli

SCORE = """
import os, time

def run(mini_batch):
    time.sleep(float(os.environ.get("SCORE_SLEEP", "0")))
    with open("seen.txt", "a") as seen:
        seen.writelines(os.path.basename(path) + "\\n" for path in mini_batch)
    return [f"{os.path.basename(path)} {open(path).read().strip()}" for path in mini_batch]
"""


@pytest.fixture
def s3(storage_servers):
    """(store through the proxy, the same bucket straight on moto, the proxy). Through the proxy, botocore
    tries each request once (s3fs still retries SlowDown a few times, 2 s in all)."""
    moto, _ = storage_servers
    direct = s3_store(moto.endpoint, f"t{uuid.uuid4().hex[:12]}")
    proxy = FaultProxy(moto.port)
    once = {"config_kwargs": {"retries": {"max_attempts": 1}}}
    through = Store("s3", "s3://", direct.root, {**direct.options, "endpoint_url": proxy.endpoint, **once}, direct.env)
    try:
        yield through, direct, proxy
    finally:
        proxy.down()


@pytest.fixture
def s3_env(s3, monkeypatch):
    through, _, _ = s3
    for name, value in through.env.items():
        monkeypatch.setenv(name, value)
    return s3


def _objects(store: Store, count: int, folder: str = "in") -> str:
    store.filesystem().pipe({store.url(folder, f"f{i:04d}.txt")[5:]: f"{i}\n".encode() for i in range(count)})
    return store.url(folder)


def _object_gets(proxy: FaultProxy) -> list[str]:
    return [path for method, path in proxy.requests if method == "GET" and "list-type" not in path]


def test_a_run_lists_once_and_fetches_each_object_once_without_asking_its_size(s3_env, write_script):
    through, direct, proxy = s3_env
    inputs = _objects(direct, 60)
    write_script(SCORE)
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[inputs],
        mini_batch_size=10,
        output="out",
        storage_options=through.storage_options(),
    )

    assert run_step(config)["status"] == "Succeeded"  # a fresh run: the plan streams to the workers
    assert proxy.count("HEAD") == 0
    assert sorted(_object_gets(proxy)) == [f"/{direct.root[5:]}/in/f{i:04d}.txt" for i in range(60)]

    direct.write_bytes(f"{inputs}/f0060.txt", b"60\n")
    proxy.reset_counts()
    rerun = run_step(config)  # the incremental plan of a rerun, from the listing alone
    assert rerun["mini_batches_reused"] == 6
    assert rerun["mini_batches_run"] == 1
    assert proxy.count("HEAD") == 0
    assert _object_gets(proxy) == [f"/{direct.root[5:]}/in/f0060.txt"]


def test_a_table_is_read_with_range_requests_of_its_row_groups(tmp_path, s3_env, write_script):
    through, direct, proxy = s3_env
    rows = 400_000
    table = pa.table({"id": np.arange(rows), "value": np.random.default_rng(0).random(rows)})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=rows // 8, compression="none")
    direct.put(tmp_path / "t.parquet", "tables", "t.parquet")
    size = (tmp_path / "t.parquet").stat().st_size
    write_script("def run(frame):\n    return frame[['id']]\n")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[{"type": "tabular", "path": direct.url("tables")}],
        mini_batch_size=pq.ParquetFile(tmp_path / "t.parquet").metadata.row_group(0).total_byte_size,
        output="out",
        append_row_file_name="ids.parquet",
        storage_options=through.storage_options(),
    )

    summary = run_step(config)

    assert summary["status"] == "Succeeded", summary["status_reason"]
    assert summary["mini_batches_total"] == 8
    assert sorted(pd.read_parquet(summary["output_file"])["id"]) == list(range(rows))
    assert proxy.count("HEAD") == 0
    assert proxy.bytes_fetched <= 1.2 * size  # each mini-batch fetched its row groups, not the file


OUTPUT_AND_REPORT = ["parallel_run_step.txt", "report.html"]


def test_storage_restarting_and_throttling_mid_run_lose_nothing(tmp_path, s3_env, write_script, monkeypatch):
    through, direct, proxy = s3_env
    inputs = _objects(direct, 60)
    write_script(SCORE)
    monkeypatch.setenv("SCORE_SLEEP", "0.2")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[inputs],
        mini_batch_size=3,
        output=through.url("scores"),
        storage_options=through.storage_options(),
    )
    proxy.fail_every = 6  # every sixth request answered 503 SlowDown, from listing to upload

    scored_at_restart = []

    def restart_when_running() -> None:
        seen = tmp_path / "seen.txt"
        while not seen.exists() or len(seen.read_text().split()) < 12:
            time.sleep(0.05)
        scored_at_restart.append(len(seen.read_text().split()))
        proxy.down()  # refused connections for 2 s, as while the service restarts
        time.sleep(2)
        proxy.up()

    restart = threading.Thread(target=restart_when_running, daemon=True)
    restart.start()
    summary = run_step(config)
    restart.join(10)

    assert summary["status"] == "Succeeded", summary["status_reason"]
    assert scored_at_restart[0] < 45  # the store went away while objects were read
    assert not restart.is_alive()
    assert summary["mini_batches_failed"] == 0  # retried inside the fetch
    assert summary["attempts_retried"] == 0
    assert proxy.failed > 5
    lines = direct.read_bytes(direct.url("scores", "parallel_run_step.txt")).decode().splitlines()
    assert lines == [f"f{i:04d}.txt {i}" for i in range(60)]  # every row exactly once, in plan order
    # the output whole, and the report beside it (upload_report), no temporary object left
    assert direct.listing(direct.url("scores")) == [direct.url("scores", name) for name in OUTPUT_AND_REPORT]


def test_a_failed_upload_leaves_the_earlier_output_and_the_run_resumes(tmp_path, s3_env, write_script):
    through, direct, proxy = s3_env
    inputs = _objects(direct, 12)
    write_script(SCORE)
    output = direct.url("scores", "parallel_run_step.txt")
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[inputs],
        mini_batch_size=4,
        output=through.url("scores"),
        run_invocation_timeout=3,  # the retry window: an upload failing longer than this fails the run
        storage_options=through.storage_options(),
    )
    assert run_step(config)["status"] == "Succeeded"
    earlier = direct.read_bytes(output)
    direct.write_bytes(f"{inputs}/f0003.txt", b"changed\n")

    proxy.fail_methods = {"PUT", "POST"}  # every upload answered 503, past the retry window
    with pytest.raises(StepFailed) as failed:
        run_step(config)
    summary = failed.value.summary
    assert summary["status"] == "Failed"
    assert "system error" in summary["status_reason"]
    assert direct.read_bytes(output) == earlier  # the earlier output stands, whole

    proxy.fail_methods = set()
    scored = (tmp_path / "seen.txt").read_text()
    resumed = run_step(config, run_dir=summary["run_dir"])
    assert resumed["status"] == "Succeeded", resumed["status_reason"]
    assert (tmp_path / "seen.txt").read_text() == scored  # what the failed run committed stands: nothing runs again
    assert direct.read_bytes(output).decode().splitlines()[3] == "f0003.txt changed"


def test_storage_secrets_reach_no_file_of_the_run_nor_its_output(tmp_path, s3_env, write_script, monkeypatch):
    through, direct, _ = s3_env
    inputs = _objects(direct, 4)
    write_script(SCORE)
    secret, from_env = "literal-s3cr3t-in-the-step", through.env["PS_TEST_S3_SECRET"]
    # moto takes any secret: one written in the step, one taken from the environment
    options = {"s3://": through.options, direct.root: {**through.options, "secret": secret}}
    config = ParallelRunConfig(
        entry_script="score.py",
        inputs=[inputs],
        output=through.url("scores"),
        storage_options=options,
        resource_monitor_interval=0.2,
    )

    summary = run_step(config)
    detached = submit(config.with_overrides(output=through.url("detached"))).wait(timeout=120)

    assert summary["status"] == "Succeeded"
    assert detached["status"] == "Succeeded", detached["status_reason"]
    assert summary["config"]["storage_options"][direct.root]["secret"] == "***"
    assert summary["config"]["storage_options"]["s3://"]["secret"] == "${env:PS_TEST_S3_SECRET}"
    files = [path for root in (Path(summary["run_dir"]), Path(detached["run_dir"])) for path in root.rglob("*")]
    for path in [path for path in files if path.is_file()]:
        data = path.read_bytes()
        assert secret.encode() not in data, path
        assert from_env.encode() not in data, path
    for url in direct.listing(direct.url("scores")) + direct.listing(direct.url("detached")):
        assert secret.encode() not in direct.read_bytes(url)


def test_credentials_in_a_url_are_masked_in_errors(s3, write_script):
    _, _, proxy = s3
    write_script("def run(mini_batch):\n    return mini_batch\n")
    url = f"http://reader:pa55word@127.0.0.1:{proxy.port}/nobucket/data.csv?sv=2024&sig=s1gnature"
    result = cli("run", "--entry-script", "score.py", "--input", url, "--output", "out")
    assert result.returncode == 2
    masked = f"http://reader:***@127.0.0.1:{proxy.port}/nobucket/data.csv?sv=***&sig=***"
    assert result.stderr.strip().splitlines() == [f"parallel-steps: {masked}: no such file or folder"]
    assert "pa55word" not in result.stderr + result.stdout
    assert "s1gnature" not in result.stderr


def test_storage_options_name_a_url_prefix(write_script):
    write_script("def run(mini_batch):\n    return mini_batch\n")
    result = cli("run", "--entry-script", "score.py", "--input", "data", "--set", 'storage_options={"s3": {}}')
    assert result.returncode == 2
    assert "storage_options: 's3' is not a URL prefix" in result.stderr
