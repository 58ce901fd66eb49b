"""A job's own references, as Azure ML's job schema reads them in a command or in program arguments.

`${{inputs.x}}` is the input's value (data: its path) and `${{outputs.x}}` the output's path; an optional
part `$[[ ... ]]` stays, brackets removed, when every input it names is given, and is dropped otherwise
(`$[[--max_rows ${{inputs.max_rows}}]]`). Command jobs (`command.py`) and parallel jobs' `task.program_arguments`
(`job.py`) read them with these rules; `${{parent...}}` bindings are the pipeline's (`binding.py`).
"""

from __future__ import annotations

import re
from typing import Any

#: `${{inputs.x}}`, `${{outputs.x}}`.
REFERENCE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_OPTIONAL = re.compile(r"\$\[\[(.*?)\]\]", re.DOTALL)


def optional_parts(text: str, given: Any) -> str:
    """`text` with each `$[[ ... ]]` kept (without its brackets) when every input it names is in `given`,
    else dropped."""

    def keep_or_drop(match: re.Match[str]) -> str:
        names = [name for kind, name in REFERENCE.findall(match.group(1)) if kind == "inputs"]
        return match.group(1) if all(name in given for name in names) else ""

    return _OPTIONAL.sub(keep_or_drop, text)
