"""The architecture check run by ./scripts/lint: imports run down the layers, no import cycle between
modules, at any scope, no module or class too long to read, and no folder left unmade.

It parses every module of a package with `ast` (nothing is imported, so it runs in any Python 3.11) and
builds the import graph from every `import` statement wherever it is: at module level, inside a function,
under `if TYPE_CHECKING:`. A function-level import hides a cycle from the interpreter, not from a reader,
so it counts. An import names the module it loads: `from .driver import Driver` depends on
`driver/__init__.py`, `from . import storage` on `storage.py`; the parent packages Python also runs are
not counted (every module would then depend on the package's `__init__`).

The layers (LAYERS), the adapters' rules and the flat modules are parallel_steps's own: they hold for
the package named PACKAGE; any other package (the tests' tiny ones) gets the checks that hold for every
package: cycles, lengths and shared file-name prefixes.

    python scripts/check_architecture.py [PACKAGE_DIR]     (default: src/parallel_steps)

Exit status 1 with one line per problem, 0 when the tree is clean.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "parallel_steps"
#: The layers of PACKAGE, top to bottom, each a floor of names: the first name under the package
#: (`parallel_steps.pool.ray.handle` is in `pool`), `__init__` for the package itself. A module imports
#: its own floor or any floor below, never one above.
LAYERS: list[tuple[str, ...]] = [
    ("__init__", "parallel_run_step"),  # faces: the package and `ParallelRunStep`
    ("cli", "airflow", "prefect", "azure"),  # adapters: siblings (ADAPTER_IMPORTS)
    ("jobs",),
    ("run",),
    ("driver",),
    ("pool",),
    ("worker",),
    ("report",),
    ("store",),
    ("cluster",),  # the conflict rule takes a step's config; the Ray pool and the Ray job use it
    ("config",),
    ("inputs",),
    ("storage", "host"),  # one floor: they may import each other (no cycle)
    ("errors", "control", "protocol", "summary", "masking", "version"),  # leaves: each other, no cycle
]
ADAPTERS = LAYERS[1]  # the second floor
#: The only imports between adapters. Airflow and Prefect cannot share an environment, and a user installs
#: one orchestrator, so an adapter stands alone; but the Airflow, Prefect and CLI adapters build their DAGs,
#: flows and commands from Azure pipelines, and azure/ needs none of the orchestrators.
ADAPTER_IMPORTS: dict[str, tuple[str, ...]] = {"airflow": ("azure",), "prefect": ("azure",), "cli": ("azure",)}
#: Below the adapters, but how a run works, not what it offers: an adapter goes through a package face.
INTERNALS = ("pool", "driver")
#: The modules that sit flat in the package: the faces, the leaves and `host`. Anything else belongs in
#: its layer's folder.
FLAT_MODULES = frozenset(
    {"__init__", "version", "errors", "control", "protocol", "summary", "masking", "host", "parallel_run_step"}
)
FLOOR = {name: floor for floor, names in enumerate(LAYERS) for name in names}
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250
#: Modules allowed past MAX_MODULE_LINES, with the reason. Keep it empty unless a module cannot be cut
#: without scattering what users read in one place.
MODULE_EXEMPTIONS: dict[str, str] = {}
#: More sibling files than this sharing a name's prefix (`ray.py`, `ray_pool.py`, `ray_handle.py`) are a
#: folder that has not been made.
MAX_SHARED_PREFIX = 2


@dataclass
class Module:
    name: str  # dotted: parallel_steps.driver.health
    path: Path
    is_package: bool
    imports: dict[str, list[int]] = field(default_factory=dict)  # module imported -> lines importing it


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
    """The package's modules that `module` imports, at any scope, each with its lines in order."""

    def add(name: str, line: int) -> None:
        if name not in modules or name == module.name:
            return
        lines = module.imports.setdefault(name, [])
        if line not in lines:  # `from .x import a, b` imports x once
            lines.append(line)

    statements = (node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom))
    for node in sorted(statements, key=lambda node: node.lineno):
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


def layer(name: str) -> str:
    """A module's layer: the first name under the package, `__init__` for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_problems(module: Module, where: Path) -> list[str]:
    """The imports of `module` that go up a layer, from one adapter into another, or into the internals."""
    own = layer(module.name)
    if own not in FLOOR:
        return [f"{where}: not in a layer (add it to LAYERS in scripts/check_architecture.py)"]
    problems = []
    for line, target in sorted((line, target) for target, lines in module.imports.items() for line in lines):
        other = layer(target)
        if other not in FLOOR:  # its own problem, once, as a module not in a layer
            continue
        if FLOOR[other] < FLOOR[own]:
            order = " > ".join("/".join(names) for names in LAYERS[FLOOR[other] : FLOOR[own] + 1])
            problems.append(
                f"{where}:{line}: imports {target} from layer {other}, above its own layer {own}"
                f" (imports run down: {order})"
            )
        elif own in ADAPTERS and other in ADAPTERS and other != own and other not in ADAPTER_IMPORTS.get(own, ()):
            problems.append(
                f"{where}:{line}: imports {target} from adapter {other}, a sibling of its own adapter {own}"
                " (adapters stand alone but for ADAPTER_IMPORTS in scripts/check_architecture.py)"
            )
        elif own in ADAPTERS and other in INTERNALS:
            problems.append(
                f"{where}:{line}: an adapter imports {target} (pool/ and driver/ are internals;"
                f" use a package face: {PACKAGE}.jobs, {PACKAGE}.cluster, ...)"
            )
    return problems


def flat_problems(root: Path) -> list[str]:
    """The modules flat in the package that belong in their layer's folder."""
    return [
        f"{shown(root, path)}: flat in {root.name}/, where only the faces, the leaves and host sit"
        " (move it into its layer's folder)"
        for path in sorted(root.glob("*.py"))
        if path.stem not in FLAT_MODULES
    ]


def prefix_problems(root: Path) -> list[str]:
    """Sibling files named alike too often: `ray.py`, `ray_pool.py`, `ray_handle.py` want a `ray/`."""
    problems = []
    for folder in sorted({path.parent for path in root.rglob("*.py")}):
        named: defaultdict[str, list[str]] = defaultdict(list)
        for path in sorted(folder.glob("*.py")):
            if not (path.stem.startswith("__") and path.stem.endswith("__")):  # __init__, __main__
                named[path.stem.lstrip("_").split("_")[0]].append(path.name)  # _ray_x.py is a ray file too
        for prefix, names in named.items():
            if len(names) > MAX_SHARED_PREFIX:
                problems.append(
                    f"{shown(root, folder)}/: {', '.join(names)} share the prefix {prefix} (a prefix shared"
                    f" by {len(names)} files is a folder that has not been made: {prefix}/)"
                )
    return problems


def shown(root: Path, path: Path) -> Path:
    """`path` as a reader finds it: from the repository (above src/), else from the package's parent."""
    return path.relative_to(root.parent.parent if root.parent.name == "src" else root.parent)


def check(root: Path) -> list[str]:
    """Every problem of the package at `root`, one readable line each."""
    modules = find_modules(root)
    problems = []
    for module in modules.values():
        text = module.path.read_text()
        tree = ast.parse(text, str(module.path))
        read_imports(module, tree, modules)
        where = shown(root, module.path)
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
    if root.name == PACKAGE:  # every module's imports read: the layers can be checked
        problems += flat_problems(root)
        for module in modules.values():
            problems += import_problems(module, shown(root, module.path))
    problems += prefix_problems(root)
    for cycle in cycles(modules):
        steps = [f"{name} (line {modules[name].imports[after][0]})" for name, after in itertools.pairwise(cycle)]
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
