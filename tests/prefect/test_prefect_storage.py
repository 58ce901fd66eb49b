"""Object storage through Prefect: a flow whose step names S3 data by an `S3Bucket` block and a URL whose
`storage_options` entry is an `AwsCredentials` block, saved to and loaded from the Prefect server, reads and
writes moto's S3 server (tests/storage_servers.py) with that block's keys and endpoint alone; the secret
reaches no artifact, no result, no log and no file of the run directory."""

import json
import uuid
from pathlib import Path

import pytest
import s3fs
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect_aws import AwsCredentials, S3Bucket
from prefect_helpers import artifacts, flow_run_id

from parallel_steps import ConfigError
from parallel_steps.prefect import parallel_run
from prefect import flow
from storage_servers import start_moto

KEY = "AKIDPARALLELSTEPS"
SECRET = f"ps-secret-{uuid.uuid4().hex}"
SCRIPT = """
import os
from pathlib import Path

def run(mini_batch):
    return [f"{os.path.basename(path)} {Path(path).read_text().strip()}" for path in mini_batch]
"""


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@flow
def score_bucket(script: str, block: str):
    credentials = AwsCredentials.load(block)
    return parallel_run(
        entry_script=script,
        inputs=S3Bucket(bucket_name="ps-prefect", bucket_folder="images", credentials=credentials),
        output="s3://ps-prefect/scores",
        storage_options={"s3://ps-prefect/scores": credentials},
        mini_batch_size=2,
        process_count_per_node=2,
        name="bucket-scoring",
    )


def test_a_flow_scores_s3_objects_with_a_credentials_block_and_the_secret_stays_hidden(
    moto, prefect_server, write_script, monkeypatch, tmp_path
):
    store = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=moto.endpoint)
    store.mkdir("ps-prefect")
    for i in range(5):
        store.pipe_file(f"ps-prefect/images/img{i}.txt", f"{i}\n".encode())
    for variable in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)  # the block alone says where S3 is and who asks
    block = f"ps-moto-{uuid.uuid4().hex[:8]}"
    AwsCredentials(
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="eu-west-1",
        aws_client_parameters={"endpoint_url": moto.endpoint},
    ).save(block)

    state = score_bucket(str(write_script(SCRIPT)), block, return_state=True)

    summary = state.result()
    assert (summary["status"], summary["items_succeeded"]) == ("Succeeded", 5)
    assert summary["config"]["inputs"][0]["path"] == ["s3://ps-prefect/images"]
    assert set(summary["config"]["storage_options"]) == {"s3://ps-prefect/images", "s3://ps-prefect/scores"}
    assert summary["config"]["storage_options"]["s3://ps-prefect/scores"]["secret"] == "***"
    scores = store.cat_file("ps-prefect/scores/parallel_run_step.txt").decode().splitlines()
    assert scores == [f"img{i}.txt {i}" for i in range(5)]
    published = [
        a for key in ("bucket-scoring-summary", "bucket-scoring-progress") for a in artifacts(flow_run_id(state), key)
    ]
    assert published
    assert not [a for a in published if SECRET in f"{a.data} {a.description}"]
    assert SECRET not in json.dumps(summary)
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id(state)])))
    assert logs
    assert not [log for log in logs if SECRET in log.message]
    results = Path(prefect_server["PREFECT_LOCAL_STORAGE_PATH"])  # the task's persisted result, cache records
    for root in (tmp_path / "runs", results):
        assert [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()] == []


@flow
def score_with(**fields):
    return parallel_run(entry_script="score.py", inputs="s3://ps-prefect/images", **fields)


def test_a_block_without_aws_credentials_is_one_line_naming_the_prefix_and_the_block():
    with pytest.raises(ConfigError) as error:
        score_with(storage_options={"s3://ps-prefect": Secret(value="x")})
    assert str(error.value) == (
        "storage_options: s3://ps-prefect: a Secret block holds no AWS credentials (use prefect-aws's "
        "AwsCredentials, MinIOCredentials or S3Bucket, or fsspec options)"
    )
