"""Ray settings that must be in the environment before `import ray` (Ray reads them when it loads), the
credentials of clusters that an engine's connection names (an Airflow connection, a Prefect block), and the
one rule for a step put on such a cluster (`on_cluster`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config.model import ParallelRunConfig

#: The Ray node label `parallel-steps node` sets; the Ray pool numbers nodes carrying it by it.
NODE_INDEX_LABEL = "parallel-steps/node-index"


def agree_on_token_auth() -> None:
    """Use Ray token authentication on every node when a token is provided, else on none.

    `ray start --head` turns it on by itself when it finds a token, but a joining node and a
    driver only when RAY_AUTH_MODE says so; `parallel-steps node` starts every part of its
    cluster, so it decides once for all of them. (A driver given someone else's `ray_address`
    cannot know: set RAY_AUTH_MODE=token there as Ray documents.)
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or _token_file().is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster address: its token, and the Jobs API's TLS check (False, or a CA bundle)."""

    token: str | None = None
    verify: bool | str = True


#: Access granted in this process by address, so a token from a connection never has to be in the environment.
_GRANTED: dict[str, ClusterAccess] = {}


def grant(address: str, access: ClusterAccess) -> None:
    """Use `access` for every Jobs API call and Ray connection to `address` made by this process."""
    _GRANTED[address] = access


def on_cluster(config: ParallelRunConfig, address: str, field: str, named_by: str, kept_in: str) -> ParallelRunConfig:
    """`config` run on the cluster at `address`, which an engine's `field` names (`named_by`, as the user
    reads it; the cluster is `kept_in` a connection or a block). A step that names another address, or does
    not run on Ray, is a ConfigError: the cluster is named in one place."""
    if config.ray_address and config.ray_address != address:
        raise ConfigError(
            "ray_address",
            f"is set and {named_by} names another cluster ({address})",
            f"name the cluster in one place: {kept_in}",
        )
    if config.backend != "ray":
        raise ConfigError(
            field, f"names a Ray cluster but the step runs on backend {config.backend!r}", "set backend=ray"
        )
    return config.with_overrides(ray_address=address)


def granted(address: str | None) -> ClusterAccess | None:
    return _GRANTED.get(address) if address else None


def tls_verify(address: str) -> bool | str:
    access = granted(address)
    return access.verify if access else True


def auth_headers(address: str | None = None) -> dict[str, str]:
    """The Jobs API's Authorization header: the token granted for `address`, else, when RAY_AUTH_MODE=token,
    the token Ray would read.

    Ray reads the mode once per process, so a process that has run a local Ray (auth disabled)
    would send no token to a token-protected cluster afterwards; given explicitly, it always does.
    """
    access = granted(address)
    if access and access.token:
        return {"Authorization": f"Bearer {access.token}"}
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN") or (_token_file().read_text() if _token_file().is_file() else "")
    return {"Authorization": f"Bearer {token.strip()}"} if token.strip() else {}


def _token_file() -> Path:
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
