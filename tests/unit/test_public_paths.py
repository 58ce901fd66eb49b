"""Every import path the README and the docs show a user works: `from parallel_steps... import ...` lines in
code blocks and dotted names in text (`parallel_steps.run.reuse_key`), after any move of the package's
modules."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FROM_IMPORT = re.compile(r"^\s*(?:>>>\s*)?from (parallel_steps(?:\.\w+)*) import ([\w, ()]+)", re.M)
DOTTED = re.compile(r"`(parallel_steps(?:\.\w+)+)")
ENGINES = ("parallel_steps.airflow", "parallel_steps.prefect")  # each needs its own environment


def shown_paths() -> list[tuple[str, str, str]]:
    """(page, module, attribute or '') for every import path a page shows."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for module, names in FROM_IMPORT.findall(text):
            for name in re.split(r"[,\s()]+", names):
                if name:
                    found.append((page.name, module, name))
        for dotted in DOTTED.findall(text):
            module, _, attribute = dotted.rpartition(".")
            found.append((page.name, module, attribute))
    return sorted(set(found))


PATHS = [path for path in shown_paths() if not f"{path[1]}.{path[2]}".startswith(ENGINES)]


def test_the_docs_show_import_paths() -> None:
    assert len(PATHS) >= 5


@pytest.mark.parametrize(("page", "module", "attribute"), PATHS)
def test_a_path_the_docs_show_imports(page: str, module: str, attribute: str) -> None:
    try:
        imported = importlib.import_module(f"{module}.{attribute}")
    except ModuleNotFoundError:
        imported = getattr(importlib.import_module(module), attribute)
    assert imported is not None, f"{page}: {module}.{attribute}"
