"""Object storage through Airflow: a DAG whose steps name S3 data by `ObjectStoragePath`s, or by URLs and a
`storage_options` entry naming a connection, reads and writes moto's S3 server (tests/storage_servers.py)
with the credentials and endpoint of a connection defined by an environment variable; the secret reaches no
XCom, no file of the run directory, no log and nothing Airflow keeps."""

import json
import uuid
from pathlib import Path

import pytest
import s3fs

from storage_servers import start_moto

KEY = "AKIDPARALLELSTEPS"
SECRET = f"ps-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def files_holding(root: Path, text: str) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


def test_steps_read_and_write_s3_with_a_connections_credentials_and_the_secret_stays_hidden(
    run_dag, airflow_db, moto, monkeypatch, tmp_path
):
    store = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=moto.endpoint)
    store.mkdir("ps-airflow")
    for i in range(5):
        store.pipe_file(f"ps-airflow/images/img{i}.txt", f"{i}\n".encode())
    store.pipe_file("ps-airflow/labels.txt", b"label\n")
    for variable in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)  # the connection alone says where S3 is and who asks
    connection = {"conn_type": "aws", "login": KEY, "password": SECRET}
    connection["extra"] = {"endpoint_url": moto.endpoint, "region_name": "eu-west-1"}
    monkeypatch.setenv("AIRFLOW_CONN_PS_MOTO", json.dumps(connection))

    run = run_dag("parallel_run_object_storage")

    assert run.returncode == 0, run.log[-5000:]
    for task, folder in (("score_paths", "paths"), ("score_urls", "urls")):
        summary = run.xcom(task)
        assert (summary["status"], summary["items_succeeded"]) == ("Succeeded", 5), summary
        assert summary["config"]["output"] == f"s3://ps-airflow/scores/{folder}"
        assert summary["config"]["storage_options"] == {
            f"s3://ps-airflow/{name}" if task == "score_paths" else "s3://ps-airflow": {
                "config_kwargs": {},
                "endpoint_url": "***",
                "anon": False,
                "key": "***",
                "secret": "***",
                "client_kwargs": {"region_name": "***"},
            }
            for name in (["images", "labels.txt", f"scores/{folder}"] if task == "score_paths" else [""])
        }
        scores = store.cat_file(f"ps-airflow/scores/{folder}/parallel_run_step.txt").decode().splitlines()
        assert scores == [f"label img{i}.txt {i}" for i in range(5)]
    assert SECRET not in json.dumps(list(run.xcoms.values()))
    assert SECRET not in run.log
    assert files_holding(tmp_path / "runs", SECRET) == []  # run.json, step.json, ledger, logs, report
    assert files_holding(airflow_db.parent, SECRET) == []  # the metadata DB (XCom, rendered fields), task logs
