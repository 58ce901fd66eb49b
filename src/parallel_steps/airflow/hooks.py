"""`RayClusterHook`: the `ray_cluster` connection type, a Ray cluster's address and token kept in an Airflow
connection (`ray_conn_id=` on the operator and the decorator) instead of DAG code or Variables.

The connection holds the head's host and port (the Jobs API, http(s)://host:8265, or the GCS, host:6379),
the token as its password, and TLS options in its extra (`{"verify": false}` or `{"ca_bundle": "/path"}`
for an https Jobs API). The token is masked in task logs, granted to this process's Ray calls for that
address only (`cluster.access.grant`), and never becomes a config field, so it is in no rendered template,
XCom, run.json or step.json.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from ..cluster.access import ClusterAccess, grant, on_cluster
from ..config import ParallelRunConfig
from ..errors import ConfigError

_JOBS_API_PORT, _GCS_PORT = 8265, 6379


class RayClusterHook(BaseHook):
    """A Ray cluster from a `ray_cluster` connection.

    Args:
        ray_conn_id: the connection's id (default ``ray_default``).

    Example:
        ``airflow connections add ray_default --conn-type ray_cluster --conn-host head.internal
        --conn-port 8265 --conn-schema https --conn-password "$RAY_AUTH_TOKEN"``
    """

    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray_cluster"
    hook_name = "Ray cluster (parallel-steps)"

    def __init__(self, ray_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ray_conn_id = ray_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login"],
            "relabeling": {
                "host": "Head node",
                "port": "Port (8265: the Jobs API; 6379: the GCS)",
                "schema": "Scheme (http or https: the Jobs API; empty: the GCS)",
                "password": "Token (RAY_AUTH_TOKEN)",
            },
            "placeholders": {
                "host": "ray-head.internal",
                "extra": '{"verify": true, "ca_bundle": "/etc/ssl/ray-ca.pem"}',
            },
        }

    def grant(self) -> str:
        """Grant the connection's token to this process's Ray calls for its address (masked in logs); the address."""
        return _granted(self.get_connection(self.ray_conn_id))

    async def agrant(self) -> str:
        """`grant`, for a trigger's event loop."""
        return _granted(await self.aget_connection(self.ray_conn_id))

    def use(self, config: ParallelRunConfig) -> ParallelRunConfig:
        """`config` run on this cluster: its address set, its token granted to this process."""
        address = self.grant()
        return on_cluster(config, address, "ray_conn_id", f"ray_conn_id {self.ray_conn_id!r}", "the connection")


def _granted(connection: Any) -> str:
    address, access = cluster_of(
        connection.host, connection.port, connection.schema, connection.password, connection.extra_dejson
    )
    if access.token:
        mask_secret(access.token)
    grant(address, access)
    return address


def cluster_of(
    host: str | None, port: int | None, scheme: str | None, token: str | None, extra: dict[str, Any]
) -> tuple[str, ClusterAccess]:
    """The address and access that a connection's fields describe."""
    if not host:
        raise ConfigError("ray_conn_id", "the connection has no host", "set the head node's host name or address")
    scheme = (scheme or "").lower()
    if "://" in host:  # the whole URL in the host field
        url = urllib.parse.urlsplit(host)
        scheme, host, port = url.scheme, url.hostname or "", url.port or port
    if scheme in ("http", "https"):
        address = f"{scheme}://{host}:{port or _JOBS_API_PORT}"
    elif scheme in ("", "ray", "gcs"):
        address = f"{host}:{port or _GCS_PORT}"
    else:
        raise ConfigError(
            "ray_conn_id", f"scheme {scheme!r} is not one the connection takes", "use http, https or none"
        )
    verify = extra.get("ca_bundle") or extra.get("verify", True)
    if isinstance(verify, str) and verify.lower() in ("true", "false"):
        verify = verify.lower() == "true"
    if not isinstance(verify, (bool, str)):
        raise ConfigError("ray_conn_id", f"extra 'verify': {verify!r} is not true or false", "or give ca_bundle: PATH")
    return address, ClusterAccess(token=token or None, verify=verify)
