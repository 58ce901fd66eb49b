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
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"
