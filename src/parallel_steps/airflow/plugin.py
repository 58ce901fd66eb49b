"""The provider's Airflow plugin (entry point `airflow.plugins`): the api-server app behind the "Run report"
link, mounted at /parallel-steps.

Every Airflow component loads plugins, but only the api-server serves them, so the app is built on its
first request (`report_app.py` imports the api-server's own modules) and loading the plugin costs nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from .links import URL_PREFIX, RunReportLink

_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _ReportApp:
    """An ASGI app that builds the report app when the api-server first sends it a request."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: _Receive, send: _Send) -> None:
        if self._app is None:
            from .report_app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class ParallelStepsPlugin(AirflowPlugin):
    """Serves run reports to users allowed to read the DAG's task instances."""

    name = "parallel_steps"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": _ReportApp(), "url_prefix": URL_PREFIX, "name": "parallel-steps run reports"}
    ]
    operator_extra_links: ClassVar[list[Any]] = [RunReportLink()]
