"""The `parallel-steps` command line: a thin adapter over the step API.

    run.py     run, plan              jobs/handle.py   status, wait, cancel, logs, runs, clean
    node.py    node (every node of a multi-node job)     common.py  what they share

Exit status: 0 the run succeeded (or was reused), 1 it failed or was canceled, or the disk refused a write
(one line naming the path, the cause and what to do),
2 invalid configuration or usage (one line naming the field or file).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

from ..errors import ParallelStepsError, WriteRefused, first_line
from ..host import end_process, require_linux
from ..store.space import refusals_told
from ..version import __version__


@contextlib.contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    """Our configuration models are built without pydantic's plugin discovery: it reads the entry points of
    every installed distribution, about 0.1 s of each command's start-up. Only while they are built (the
    commands' imports), so a pydantic plugin still sees the models of entry scripts, in workers and elsewhere."""
    earlier = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        if earlier is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = earlier


with _without_pydantic_plugins():
    from ..config.types import default_run_root
    from . import jobs, run
    from .common import split_script_args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["node"]:  # its own parser: --help and options before STEP.yaml must reach it
        from .node import main as node_main

        return node_main(argv[1:])
    argv, script_args = split_script_args(argv)
    args = _parser().parse_args(argv)
    args.script_args = script_args
    try:
        require_linux()
        with refusals_told(default_run_root()):  # also where no run is launched: `runs` mends the index
            code: int = args.command(args)
        return code
    except WriteRefused as exc:
        print(f"parallel-steps: {exc}", file=sys.stderr)
        return 1
    except ParallelStepsError as exc:
        print(f"parallel-steps: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("parallel-steps: interrupted", file=sys.stderr)
        return 1


def console() -> NoReturn:
    """`parallel-steps` and `python -m parallel_steps.cli`: `main()`, then the process ends without the
    interpreter's teardown (host.end_process)."""
    end_process(main())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parallel-steps", description="Run a ParallelRunStep-style parallel batch step."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    run.add_commands(commands)
    jobs.add_commands(commands)
    # Listed for the help only: main() hands `node ...` to cli/node.py, which has its own options.
    commands.add_parser(
        "node", add_help=False, help="run on every node of a multi-node job (Ray); see `parallel-steps node --help`"
    )
    return parser
