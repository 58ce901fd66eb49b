"""The entrypoint of a run's Ray job: choose the Python that runs the driver, check that it imports what the
driver needs, then become `python -m parallel_steps.jobs.detached RUN_DIR RUN_ID` in it.

The Jobs API runs an entrypoint with /bin/sh on the node the job starts on, where a bare `python` is
whatever PATH finds there; a cluster started with a virtualenv's own `ray` without activating it
(`/opt/ray/bin/ray start --head`) has its Python off PATH, so a bare `python` is another interpreter, or
none. So the job starts this module with the interpreter of the Ray worker that supervises the job (the
shell's parent), and the module finds the cluster's environment from the Ray package that worker has
loaded; or it uses the Python the step names (`ray_job_python`). It imports the standard library only:
it may run in a base interpreter outside that environment.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

#: What the driver imports, by module name: parallel-steps' dependencies and Ray (tests/core/test_lineage.py
#: checks the list against pyproject.toml).
REQUIRED = ("ray", "pydantic", "pyarrow", "pandas", "psutil", "yaml", "rich", "cloudpickle", "bokeh")
MIN_PYTHON = (3, 11)
_RAYLET = re.compile(r"(/\S+)/ray/_raylet\.so$")
_CHECK = (
    "import importlib.util, sys; print(sys.version_info[0], sys.version_info[1]); "
    "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
)


def entrypoint(run_dir: str, run_id: str, python: str | None) -> str:
    """The job's shell command: this module, in the interpreter of the supervisor (`/proc/$PPID/exe`),
    given the supervisor's pid (to find the cluster's environment from) or the Python the step names."""
    args = ["-m", "parallel_steps.jobs.ray_job_entry", run_dir, run_id]
    named = [shlex.quote(python)] if python else []
    return " ".join(['"$(readlink /proc/$PPID/exe)"', *map(shlex.quote, args), "$PPID", *named])


def cluster_python(supervisor: int) -> str:
    """The Python of the environment whose Ray runs the job: `<prefix>/bin/python3` of the site-packages
    the supervisor loaded Ray's `_raylet.so` from, else the supervisor's own executable."""
    try:
        maps = Path(f"/proc/{supervisor}/maps").read_text()
    except OSError:
        maps = ""
    for line in maps.splitlines():
        match = _RAYLET.search(line)
        if match:
            prefix = Path(match.group(1)).parents[2]  # <prefix>/lib/pythonX.Y/site-packages
            for name in ("python3", "python"):
                candidate = prefix / "bin" / name
                if os.access(candidate, os.X_OK):
                    return str(candidate)
            break
    return os.path.realpath(f"/proc/{supervisor}/exe")


def problem(python: str, named: bool) -> str | None:
    """Why `python` cannot run the driver, as one line naming it and what to do; None when it can."""
    from ..version import __version__

    whose = "ray_job_python" if named else "the Python of the cluster's Ray"
    fix = f"set ray_job_python to a Python that has them, or install them into it: {python} -m pip install " + (
        f"'parallel-steps[ray]=={__version__}'"
    )
    try:
        found = subprocess.run(
            [python, "-c", _CHECK, *REQUIRED], capture_output=True, text=True, timeout=120, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        return f"ray_job_python: {python} ({whose}) cannot be run on {os.uname().nodename}: {reason}"
    version, missing = tuple(int(n) for n in found[0].split()), found[1].split() if len(found) > 1 else []
    if version < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        return f"ray_job_python: {python} ({whose}) is Python {'.'.join(map(str, version))} (parallel-steps needs {wanted} or later; {fix})"
    if missing:
        return f"ray_job_python: {python} ({whose}) cannot import {', '.join(missing)} ({fix})"
    return None


def main(argv: list[str]) -> int:
    run_dir, run_id, supervisor, *named = argv
    python = named[0] if named else cluster_python(int(supervisor))
    reason = problem(python, bool(named))
    if reason:
        print(reason, file=sys.stderr)
        return 2
    os.execvp(python, [python, "-m", "parallel_steps.jobs.detached", run_dir, run_id])
    return 0  # not reached: the driver has replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
