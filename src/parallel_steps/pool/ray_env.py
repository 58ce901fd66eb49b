"""Ray settings that must be in the environment before `import ray` (Ray reads them when it loads)."""

from __future__ import annotations

import os
from pathlib import Path

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


def auth_headers() -> dict[str, str]:
    """The Jobs API's Authorization header when RAY_AUTH_MODE=token, from the token Ray would read.

    Ray reads the mode once per process, so a process that has run a local Ray (auth disabled)
    would send no token to a token-protected cluster afterwards; given explicitly, it always does.
    """
    if os.environ.get("RAY_AUTH_MODE") != "token":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN") or (_token_file().read_text() if _token_file().is_file() else "")
    return {"Authorization": f"Bearer {token.strip()}"} if token.strip() else {}


def _token_file() -> Path:
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
