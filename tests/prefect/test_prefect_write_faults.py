"""A write the disk refuses, in a Prefect flow run (issue 47): the task run fails with one line naming the path,
the cause and what to do, whether the write was refused before the run began (the run index) or while it ran
(the ledger), and no traceback of the refused write reaches the flow run's logs. The failpoint (store/space.py)
is set in this process, where the task runs the driver, and in the environment, for the workers."""

import errno
import os

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect_helpers import flow_run_id, wait_for

from parallel_steps.prefect import WriteRefused, parallel_run
from parallel_steps.store import space
from prefect import flow

ECHO = "def run(mini_batch):\n    return [open(path).read().strip() for path in mini_batch]\n"


@flow
def one_step(**fields):
    return parallel_run(**fields)


def logs_of(run) -> str:
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run])))
    return "\n".join(log.message for log in logs)


@pytest.mark.parametrize(
    ("site", "fault", "raised", "told"),
    [
        ("run_index", "EROFS", WriteRefused, "{root}/index.sqlite: a read-only file system (make it writable"),
        ("ledger", "EIO", Exception, "/ledger.sqlite: an I/O error (check the disk (the system log says more)"),
    ],
)
def test_a_refused_write_fails_the_task_run_in_one_line(
    write_script, make_files, monkeypatch, site, fault, raised, told
):
    monkeypatch.setenv("PARALLEL_STEPS_FAULT", f"{site}:{fault}")
    monkeypatch.setattr(space, "_FAULT", (site, getattr(errno, fault), 1))
    monkeypatch.setattr(space, "_hits", type(space._hits)())
    state = one_step(
        entry_script=str(write_script(ECHO)), inputs=str(make_files(4)), mini_batch_size=2, return_state=True
    )
    assert state.is_failed()
    line = told.format(root=os.environ["PARALLEL_STEPS_HOME"])
    with pytest.raises(raised, match="then rerun the step in the same run directory") as failed:
        state.result()
    assert line in str(failed.value)
    assert len(str(failed.value).splitlines()) == 1
    logs = wait_for(lambda: (text := logs_of(flow_run_id(state))) and line in text and text, what="the task's logs")
    assert "OSError" not in logs
    assert "sqlite3." not in logs
