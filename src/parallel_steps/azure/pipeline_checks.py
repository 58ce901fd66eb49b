"""Every problem a pipeline run would meet in its jobs, found before the first one starts.

`plan` lists them all and exits non-zero; `run` refuses the file with the first (and how many more
there are) before any job runs, rather than after its upstream jobs ran for minutes. Each job is
checked as `run` binds it, with the outputs of the jobs before it where this run will put them:
every field known and of its type (bindings resolved), the entry script there and compiling, a
command's `code:` folder there, and for a job that reads no other's outputs its inputs and the
partition columns of the first file of each table.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..config.secrets import storage_settings
from ..errors import ConfigError, InputError
from ..run.checks import check_inputs, entry_script_path, script_path
from ..run.plan import planner_for
from ..storage import options as storage_options

if TYPE_CHECKING:
    from .pipeline import Node
    from .pipeline_run import PipelineRun


def pipeline_problems(run: PipelineRun, only: str | None = None) -> list[tuple[str, str]]:
    """(where, what) per problem: the file (and the component file the job runs); the job and field, and what
    is wrong."""
    produced = dict(run.bindings.produced)
    run.assume_produced()  # what the jobs before it make, where this run puts it
    problems = []
    try:
        for node in run.pipeline.nodes.values():
            if only is not None and node.name != only:
                continue
            try:
                _check(run, node)
            except (ConfigError, InputError) as exc:
                source = f" (component {node.component})" if node.component else ""
                problems.append((f"{run.pipeline.file}{source}", str(exc)))
    finally:
        run.bindings.produced = produced
    return problems


def _check(run: PipelineRun, node: Node) -> None:
    from .pipeline_run import naming

    with naming(node):
        run.bindings.node_outputs(node)
        if node.kind == "command":
            job, _ = run.command(node)
            code = job.get("code")
            if code and not os.path.isdir(str(code)):
                raise ConfigError("code", f"{code} is not a folder")
            return
        try:
            config = run.parallel_config(node, make=False)
        except InputError:  # an input the jobs before it make, not made yet: its script can still be checked
            if not node.upstream:
                raise
            task = node.job.get("task") or {}
            script_path(str(task.get("entry_script", "")), task.get("code"))
            return
        entry_script_path(config)
        if not node.upstream:  # its inputs are there now
            check_inputs(config)
            with storage_options.using(storage_settings(config)):
                planner_for(config.plan_settings()).check_partition_keys()
