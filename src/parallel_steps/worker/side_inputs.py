"""Side inputs and models on a worker's machine: copied once per run and machine where they must be.

Those named by URLs are always copied; local paths too on Ray, whose nodes may not share a
filesystem. Copies live under `side_inputs_dir()/<run id>/<name>/` (models under `.models/<name>/`),
and the pool removes that folder when the run ends. The worker's spec, and the arguments naming
side inputs, are pointed at the copies.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path

from ..protocol import WorkerSpec
from ..storage.objects import is_url
from ..store.space import cannot_write, write_failed_line, write_site

_MODELS = ".models"  # models' copies beside side inputs' (no side input name starts with a dot)
_DOWNLOADS = ".downloads"  # Ray actors' copies of files named by URLs, a folder each


def localize_side_inputs(spec: WorkerSpec, copy_paths: bool) -> WorkerSpec:
    """Copy side inputs and models once to this machine and point the spec (and arguments naming side
    inputs) at the copies: those named by URLs always, local paths too with `copy_paths` (Ray nodes may
    not share a filesystem). Copies live under side_inputs_dir()/<run id>/<name>/ (models under
    .models/<name>/), removed when the run ends."""
    root = side_inputs_root(spec)
    side_inputs = _copies(spec.side_inputs, root, copy_paths)
    models = _copies(spec.models, root / _MODELS, copy_paths)
    if not side_inputs and not models:
        return spec
    moves = sorted(((spec.side_inputs[name], path) for name, path in side_inputs.items()), key=lambda m: -len(m[0]))
    return dataclasses.replace(
        spec,
        side_inputs={**spec.side_inputs, **side_inputs},
        models={**spec.models, **models},
        arguments=[_repoint(arg, moves) for arg in spec.arguments],
    )


def _copies(entries: dict[str, str], root: Path, copy_paths: bool) -> dict[str, str]:
    """name -> local copy of the entries that need one (URLs; local paths too with `copy_paths`)."""
    wanted = {name: path for name, path in entries.items() if copy_paths or is_url(path)}
    if not wanted:  # most steps: no import of asyncio and fsspec (a tenth of a second of each worker's start)
        return {}
    from ..storage.fetch import copy_once

    copies = {}
    for name, path in wanted.items():
        write_site("side_input_copy", root / name)
        copies[name] = copy_once(path, root / name)
    return copies


def copy_failure(exc: Exception) -> str:
    """Why the side inputs could not be copied, in one line: a write the disk refused names the path, the cause
    and what to do (store/space.py)."""
    if cannot_write(exc):
        return write_failed_line(exc, side_inputs_dir())
    return f"{type(exc).__name__}: {exc}"


def side_inputs_dir() -> Path:
    """Where every run's side-input copies go on this machine. Asked when needed, not when the module is
    imported: the first question for the temporary folder writes a probe file in it (tempfile's check that
    it is writable), which a worker killed at that moment would leave behind."""
    return Path(tempfile.gettempdir()) / "parallel_steps" / "side_inputs"


def remove_copies(root: Path) -> None:
    """A run's folder of copies on this machine (`side_inputs_root`), and the folders above it in the temporary
    folder when no other run's copies are there: nothing the run made stays in $TMPDIR."""
    shutil.rmtree(root, ignore_errors=True)
    for folder in (root.parent, root.parent.parent):  # side_inputs/, parallel_steps/
        try:
            folder.rmdir()
        except OSError:  # another run's copies are there (or it is gone)
            return


def downloads_folder(spec: WorkerSpec) -> Path:
    """Where a Ray actor copies the files named by URLs of its mini-batches: in the run's folder of copies on its
    node, which the pool removes at the run's end, so that an actor killed while it held copies leaves none."""
    return side_inputs_root(spec) / _DOWNLOADS / spec.process_name


def side_inputs_root(spec: WorkerSpec) -> Path:
    """This run's folder of side-input copies on a machine (the run folder holds `parts_dir`)."""
    return side_inputs_dir() / Path(spec.parts_dir).parent.name


def copies_root(spec: WorkerSpec, copy_paths: bool) -> Path | None:
    """Where `localize_side_inputs(spec, copy_paths)` puts copies of side inputs and models on a
    machine, when it makes any: the folder a pool removes when the run ends."""
    entries = [*spec.side_inputs.values(), *spec.models.values()]
    return side_inputs_root(spec) if any(copy_paths or is_url(path) for path in entries) else None


def _repoint(argument: str, moves: list[tuple[str, str]]) -> str:
    """Replace a side input's original path inside an argument (whole path components only)."""
    for source, local in moves:
        literal = local.replace("\\", "\\\\")  # a replacement reads backslashes as escapes
        argument = re.sub(re.escape(source) + r"(?=$|[/\s,;:])", literal, argument)
    return argument
