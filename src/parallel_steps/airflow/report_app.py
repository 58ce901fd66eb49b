"""The api-server side of the "Run report" link: `GET /parallel-steps/reports/{dag_id}/{run_id}/{task_id}`
returns the task instance's run report page.

Who may see it is Airflow's decision (the auth manager: read access to the DAG's task instances, as for
its logs). Which file is served comes from the task instance's own summary in XCom, and is served only if
it is a run's `logs/report.html` under the run root of the api-server (PARALLEL_STEPS_HOME): the request
names a task instance, never a path, and an XCom rewritten to point elsewhere is refused.
"""

from __future__ import annotations

from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Query, status
from fastapi.responses import FileResponse

from ..config.types import default_run_root
from ..report import served_report

#: The XComs holding a run's summary: a succeeded task's result, a failed one's `parallel_run_summary`.
SUMMARY_KEYS = ("return_value", "parallel_run_summary")
#: The page draws from its own inline data and scripts: nothing else may load, nor may it be framed.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data: blob:; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def create_app() -> FastAPI:
    app = FastAPI(title="parallel-steps run reports", docs_url=None, redoc_url=None, openapi_url=None)
    readable = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE))

    @app.get("/reports/{dag_id}/{run_id}/{task_id}", dependencies=[readable], response_class=FileResponse)
    def report(
        dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: Annotated[int, Query(ge=-1)] = -1
    ) -> FileResponse:
        summary = _summary(session, dag_id, run_id, task_id, map_index)
        page = served_report(summary.get("report"), default_run_root(None))
        if page is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "this task instance has no run report")
        return FileResponse(page, media_type="text/html", headers=_HEADERS)

    return app


def _summary(session: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> dict[str, Any]:
    """The run summary the task instance keeps in XCom (empty when it has none)."""
    for key in SUMMARY_KEYS:
        query = XComModel.get_many(
            run_id=run_id, key=key, task_ids=task_id, dag_ids=dag_id, map_indexes=map_index, limit=1
        )
        found = session.scalars(query).first()
        if found is not None:
            value = XComModel.deserialize_value(found)
            if isinstance(value, dict):
                return value
    return {}
