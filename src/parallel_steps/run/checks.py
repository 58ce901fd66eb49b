"""Everything a run needs that can be checked before anything is written: the inputs exist, the entry
script compiles, side inputs are there and every `${side_inputs.NAME}` names one.

Errors are one line naming the field or file (ConfigError, InputError); a run that fails
here leaves no trace.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..config.model import ParallelRunConfig
from ..errors import ConfigError, InputError
from ..inputs.planner import iter_files
from ..storage.objects import GLOB_CHARS, is_url

_SIDE_INPUT_REF = re.compile(r"\$\{side_inputs\.([A-Za-z0-9_.-]+)\}")


@dataclass(frozen=True)
class Checked:
    """What the checks found: the entry script (None for callables), side inputs and models by name
    (absolute paths, or URLs), and the arguments with `${side_inputs.NAME}` replaced by those."""

    entry_script: Path | None
    side_inputs: dict[str, str]
    models: dict[str, str]
    arguments: list[str]


def check_step(config: ParallelRunConfig, entry_callables: bytes | None = None) -> Checked:
    """Check what can be checked without listing the inputs (a missing input path is found here;
    an empty folder deep in the input only when the plan gets there)."""
    if not config.inputs:
        raise ConfigError("inputs", "no inputs given", "use --input PATH, or inputs: in the step file")
    if config.source_directory and not Path(config.source_directory).is_dir():
        raise ConfigError("source_directory", f"{config.source_directory} is not a folder")
    for dataset in config.plan_settings().inputs:  # for a step over partitions, each partition's
        for path in dataset.path:
            if not (is_url(path) or GLOB_CHARS & set(path) or os.path.lexists(path)):
                raise InputError(path, "no such file or folder")
    script = entry_script_path(config) if entry_callables is None else None
    side_inputs = _data_paths(config.side_inputs, "side input")
    models = _data_paths(config.models, "model")
    return Checked(script, side_inputs, models, _substitute(config.arguments, config.side_inputs, side_inputs))


def _data_paths(entries: dict[str, str], kind: str) -> dict[str, str]:
    """Side inputs or models: each must exist (URLs are read by the workers); local paths become absolute."""
    paths = {}
    for name, path in entries.items():
        if not is_url(path) and not os.path.exists(path):
            raise InputError(path, f"{kind} {name!r} not found")
        paths[name] = path if is_url(path) else os.path.abspath(path)
    return paths


def check_inputs(config: ParallelRunConfig, entry_callables: bytes | None = None) -> None:
    """`check_step`, and the first file of every local input found (before a run goes to the background)."""
    check_step(config, entry_callables)
    for dataset in config.plan_settings().inputs:  # for a step over partitions, each partition's
        for path in dataset.path:
            if not is_url(path):
                next(iter_files([path]))


def entry_script_path(config: ParallelRunConfig) -> Path:
    """The entry script (relative to source_directory when one is set), checked to exist and compile."""
    if not config.entry_script:
        raise ConfigError("entry_script", "is required to run a step", "e.g. --entry-script score.py")
    return script_path(config.entry_script, config.source_directory, config.max_concurrency_per_worker)


def script_path(entry_script: str, source_directory: str | None, max_concurrency: int = 1) -> Path:
    """`entry_script_path`'s checks of a script named apart from a config (a pipeline job's task)."""
    path = Path(source_directory or ".") / entry_script
    if not path.is_file():
        raise ConfigError("entry_script", f"{path} not found")
    try:
        module = ast.parse(path.read_bytes(), str(path))
    except SyntaxError as exc:
        raise ConfigError("entry_script", f"{path} line {exc.lineno}: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError("entry_script", f"{path} cannot be read ({exc})") from None
    if max_concurrency > 1 and _plain_run(module):
        raise ConfigError(
            "max_concurrency_per_worker",
            f"{max_concurrency} mini-batches in flight need an `async def run(mini_batch)`, "
            f"and {path} defines a plain `def run`",
            "make run() a coroutine, or set max_concurrency_per_worker: 1 (process_count_per_node adds workers)",
        )
    return path.absolute()


def _plain_run(module: ast.Module) -> bool:
    """Whether the script's run() is a plain `def` (the last top-level definition counts, as at import)."""
    defined = [node for node in module.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    runs = [node for node in defined if node.name == "run"]
    return bool(runs) and isinstance(runs[-1], ast.FunctionDef)


def _substitute(arguments: list[str], configured: dict[str, str], local: dict[str, str]) -> list[str]:
    """`${side_inputs.NAME}`, or an argument equal to a side input's path, becomes its local path."""
    by_path = {path: local[name] for name, path in configured.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in local:
            raise ConfigError(
                "arguments", f"${{side_inputs.{name}}} names no side input", f"have: {', '.join(local) or 'none'}"
            )
        return local[name]

    return [by_path.get(arg, _SIDE_INPUT_REF.sub(replace, arg)) for arg in arguments]
