"""The command line's start-up: its configuration models skip pydantic's plugin discovery, and nothing of
that reaches the environment that workers and entry scripts inherit (their pydantic plugins still load)."""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = (
    "import os, parallel_steps.cli, pydantic.plugin._loader as loader; "
    "print(os.environ.get('PYDANTIC_DISABLE_PLUGINS'), loader._plugins is None)"
)


def _after_import(**environment: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    result = subprocess.run(
        [sys.executable, "-c", CHECK], env={**env, **environment}, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_the_commands_build_their_models_without_discovering_plugins_and_leave_the_environment_as_it_was():
    assert _after_import() == "None True"  # not discovered, and a later model (a user's) still discovers them


def test_a_users_own_setting_is_kept():
    assert _after_import(PYDANTIC_DISABLE_PLUGINS="1") == "1 True"
