"""Command nodes: a pipeline's `type: command` job, run as a subprocess of its `command:`.

It runs in a snapshot of its `code:` folder under the node's folder (as Azure ML runs one), never among the
user's files. `${{inputs.x}}` becomes the input's value (data: its path), `${{outputs.x}}` the output's path,
and an optional part `$[[ ... ]]` is dropped when an input it names is not given, as Azure ML does
(references.py). The command runs under `bash -c` with this environment's Python first on PATH (so
`python script.py` runs here), its output in `<node folder>/logs/std_log.txt`, Azure ML's name for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, error_line
from ..inputs.fingerprints import code_files
from ..storage.objects import is_url
from .binding import PLACEHOLDER_ROOT
from .pipeline import COMMAND_IGNORED, COMMAND_KEYS
from .references import REFERENCE, optional_parts

_STOP_GRACE_S = 10.0
_TAIL_BYTES = 8192


class CommandFailed(Exception):
    """The command exited with an error, or was stopped; the message is the one line to show."""


def command_line(job: dict[str, Any], where: str) -> str:
    """The node's `command:` with its references replaced by values and paths."""
    unknown = [key for key in job if key not in COMMAND_KEYS]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", "has no meaning here", f"supported: {', '.join(COMMAND_KEYS)}")
    command = job.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command", "is required")
    inputs, outputs = job.get("inputs") or {}, job.get("outputs") or {}

    def value(match: re.Match[str]) -> str:
        kind, name = match.groups()
        found = inputs if kind == "inputs" else outputs
        if name not in found:
            raise ConfigError(f"{where}.command", f"{match.group(0)} names no {kind[:-1]}", f"have: {', '.join(found)}")
        item = found[name]
        return str(item["path"] if isinstance(item, dict) else item)

    return REFERENCE.sub(value, optional_parts(command, inputs)).strip()


def ignored_keys(job: dict[str, Any], where: str) -> list[str]:
    """The keys of a command node accepted with no effect here."""
    return [f"{where}.{key}" for key in COMMAND_IGNORED if key in job]


def command_key(job: dict[str, Any], keyed_command: str, skip: Path) -> str:
    """What makes two runs of a command node the same: the command (outputs at placeholder paths), its
    code and input files (names, sizes, modification times; not under `skip`, the run root, nor in caches
    such as the `__pycache__` a parallel job importing the same code leaves), its literal inputs and environment."""
    digest = hashlib.sha256(keyed_command.encode())
    digest.update(json.dumps(job.get("environment_variables") or {}, sort_keys=True, default=str).encode())
    sources = [job.get("code")] + [v["path"] for v in (job.get("inputs") or {}).values() if isinstance(v, dict)]
    for source in sources:
        if isinstance(source, str):
            _digest_tree(digest, source, skip.resolve())
    return digest.hexdigest()


def _digest_tree(digest: Any, path: str, skip: Path) -> None:
    digest.update(f"\0{path}\0".encode())
    if is_url(path) or not os.path.exists(path):
        return
    if os.path.isfile(path):
        stat = os.stat(path)
        digest.update(f"{stat.st_size} {stat.st_mtime_ns}".encode())
        return
    for file, stat in code_files(path, {skip}):
        digest.update(f"{os.path.relpath(file, path)} {stat.st_size} {stat.st_mtime_ns}\n".encode())


def keyed(command: str, outputs: dict[str, dict[str, Any]]) -> str:
    """`command` with the outputs' paths replaced by their placeholders (their place changes from run to run)."""
    for name, spec in sorted(outputs.items(), key=lambda item: -len(str(item[1]["path"]))):
        command = command.replace(str(spec["path"]), str(PLACEHOLDER_ROOT / name))
    return command


def run_command(job: dict[str, Any], command: str, node_dir: Path, cancel: threading.Event | None) -> None:
    """Run the command to its end; raises CommandFailed with the error's one line. It runs in a snapshot of its
    `code:` folder (`<node folder>/code`, as Azure ML runs one), so that nothing it writes lands among the user's
    files; without `code:`, in the current folder."""
    code = job.get("code") or os.getcwd()
    if not os.path.isdir(code):
        raise ConfigError("code", f"{code} is not a folder")
    if job.get("code"):
        snapshot = node_dir / "code"
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(code, snapshot, symlinks=True)
        code = str(snapshot)
    log_path = node_dir / "logs" / "std_log.txt"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **{str(k): str(v) for k, v in (job.get("environment_variables") or {}).items()}}
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment.get("PATH", "")
    bash = shutil.which("bash") or "/bin/sh"
    with open(log_path, "ab") as log:
        log.write(f"$ {command}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [bash, "-c", command],
            cwd=code,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        code_or_none = _wait(process, cancel)
    if code_or_none is None:
        raise CommandFailed("canceled: the command was stopped")
    if code_or_none != 0:
        raise CommandFailed(f"exited with {_exit_name(code_or_none)}: {_last_error(log_path)} (log: {log_path})")


def _wait(process: subprocess.Popen[bytes], cancel: threading.Event | None) -> int | None:
    """The exit code; None when `cancel` was set (the command's process group is stopped then)."""
    while True:
        try:
            return process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                break
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return None


def _exit_name(code: int) -> str:
    return f"{signal.Signals(-code).name}({code})" if code < 0 else str(code)


def _last_error(path: Path) -> str:
    """The error at the end of a command's output: a traceback's exception, else the last line printed."""
    with open(path, "rb") as file:
        file.seek(max(0, path.stat().st_size - _TAIL_BYTES))
        tail = file.read().decode("utf-8", errors="replace")
    if "Traceback (most recent call last):" in tail:
        return error_line(tail)
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
