"""The architecture check run by ./scripts/lint: no import cycle between modules, at any scope, and no
module or class too long to read.

It parses every module of a package with `ast` (nothing is imported, so it runs in any Python 3.11) and
builds the import graph from every `import` statement wherever it is: at module level, inside a function,
under `if TYPE_CHECKING:`. A function-level import hides a cycle from the interpreter, not from a reader,
so it counts. An import names the module it loads: `from .driver import Driver` depends on
`driver/__init__.py`, `from . import storage` on `storage.py`; the parent packages Python also runs are
not counted (every module would then depend on the package's `__init__`).

    python scripts/check_architecture.py [PACKAGE_DIR]     (default: src/parallel_steps)

Exit status 1 with one line per problem, 0 when the tree is clean.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250
#: Modules allowed past MAX_MODULE_LINES, with the reason. Keep it empty unless a module cannot be cut
#: without scattering what users read in one place.
MODULE_EXEMPTIONS: dict[str, str] = {}


@dataclass
class Module:
    name: str  # dotted: parallel_steps.driver.health
    path: Path
    is_package: bool
    imports: dict[str, int] = field(default_factory=dict)  # module imported -> first line importing it


def find_modules(root: Path) -> dict[str, Module]:
    """Every module of the package at `root`, by dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = Module(".".join(parts), path, is_package)
    return modules


def resolve(module: Module, level: int, target: str | None) -> str:
    """The absolute name of a relative import (`from ..store import runs` in parallel_steps.driver.x)."""
    if level == 0:
        return target or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def read_imports(module: Module, tree: ast.Module, modules: dict[str, Module]) -> None:
    """The package's modules that `module` imports, at any scope."""

    def add(name: str, line: int) -> None:
        if name in modules and name != module.name:
            module.imports.setdefault(name, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, node.level, node.module)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in modules else source, node.lineno)


def components(modules: dict[str, Module]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(name: str) -> None:  # a few hundred modules: recursion depth is no concern
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in modules[name].imports:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(component)

    for name in sorted(modules):
        if name not in index:
            visit(name)
    return found


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Import cycles that together use every import inside a cycle, each as short as it can be: fixing
    every cycle listed leaves none."""
    found = []
    for component in components(modules):
        covered: set[tuple[str, str]] = set()
        for source in sorted(component):
            for target in modules[source].imports:
                if target not in component or (source, target) in covered:
                    continue
                cycle = [source, *shortest_path(modules, component, target, source)]
                covered.update(itertools.pairwise(cycle))
                found.append(cycle)
    return sorted(found)


def shortest_path(modules: dict[str, Module], component: set[str], start: str, end: str) -> list[str]:
    """The shortest import path from `start` to `end` inside a component (breadth first)."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        name = queue.pop(0)
        if name == end:
            return paths[name]
        for target in modules[name].imports:
            if target in component and target not in paths:
                paths[target] = [*paths[name], target]
                queue.append(target)
    raise AssertionError("every module of a strongly connected component reaches every other")


def check(root: Path) -> list[str]:
    """Every problem of the package at `root`, one readable line each."""
    modules = find_modules(root)
    problems = []
    for module in modules.values():
        text = module.path.read_text()
        tree = ast.parse(text, str(module.path))
        read_imports(module, tree, modules)
        where = module.path.relative_to(root.parent.parent if root.parent.name == "src" else root.parent)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and module.name not in MODULE_EXEMPTIONS:
            problems.append(f"{where}: {lines} lines (a module has at most {MAX_MODULE_LINES}; split it by concern)")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    problems.append(
                        f"{where}:{node.lineno}: class {node.name} is {length} lines (at most {MAX_CLASS_LINES})"
                    )
    for cycle in cycles(modules):
        steps = [f"{name} (line {modules[name].imports[after]})" for name, after in itertools.pairwise(cycle)]
        problems.append("import cycle: " + " -> ".join([*steps, cycle[-1]]))
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent / "src" / "parallel_steps")
    problems = check(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"architecture check: {len(problems)} problem(s) (docs/architecture.md draws the layers)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
