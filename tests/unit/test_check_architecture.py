"""The architecture check (scripts/check_architecture.py) on tiny packages in tmp_path: import cycles at
any scope, and modules or classes too long."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_architecture.py"
_spec = importlib.util.spec_from_file_location("check_architecture", SCRIPT)
check_architecture = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check_architecture  # a script, not a package module: loaded by its path
_spec.loader.exec_module(check_architecture)


def package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "src" / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_clean_tree_passes(tmp_path):
    root = package(
        tmp_path,
        {
            "low.py": "X = 1\n",
            "high.py": "from .low import X\nfrom . import low\nimport pkg.low\n",
            "sub/__init__.py": "",
            "sub/leaf.py": "from ..low import X\n",
        },
    )
    assert check_architecture.check(root) == []
    assert check_architecture.main(["check", str(root)]) == 0


def test_a_cycle_through_a_function_level_import_is_caught(tmp_path):
    root = package(
        tmp_path,
        {
            "a.py": "from .b import helper\n",
            "b.py": "def helper():\n    from .a import something  # hidden from the interpreter, not from us\n",
        },
    )
    assert check_architecture.check(root) == ["import cycle: pkg.a (line 1) -> pkg.b (line 2) -> pkg.a"]


def test_type_checking_imports_and_from_package_import_submodule_count(tmp_path):
    root = package(
        tmp_path,
        {
            "models.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import reader\n",
            "sub/__init__.py": "",
            "sub/reader.py": "from .. import models\n",
        },
    )
    (problem,) = check_architecture.check(root)
    assert problem == "import cycle: pkg.models (line 3) -> pkg.sub.reader (line 1) -> pkg.models"


def test_a_name_imported_from_a_package_depends_on_its_init(tmp_path):
    root = package(
        tmp_path,
        {
            "__init__.py": "from .api import run\n",
            "api.py": "def run(): ...\n",
            "tool.py": "from . import run\n",  # the package's __init__, which imports api: no cycle
        },
    )
    assert check_architecture.check(root) == []
    root = package(tmp_path, {"__init__.py": "from .api import run\n", "api.py": "from . import VERSION\n"})
    assert check_architecture.check(root) == ["import cycle: pkg (line 1) -> pkg.api (line 1) -> pkg"]


def test_every_import_in_a_cycle_is_listed_once(tmp_path):
    root = package(
        tmp_path,
        {
            "a.py": "from . import b\nfrom . import c\n",
            "b.py": "from . import a\n",
            "c.py": "from . import a\n",
        },
    )
    assert check_architecture.check(root) == [
        "import cycle: pkg.a (line 1) -> pkg.b (line 1) -> pkg.a",
        "import cycle: pkg.a (line 2) -> pkg.c (line 1) -> pkg.a",
    ]


def test_imports_of_other_packages_are_not_followed(tmp_path):
    root = package(tmp_path, {"a.py": "import os\nimport json.decoder\nfrom collections import abc\n"})
    assert check_architecture.check(root) == []


def test_long_modules_and_classes_are_named_with_their_length(tmp_path, monkeypatch):
    monkeypatch.setattr(check_architecture, "MAX_MODULE_LINES", 5)
    monkeypatch.setattr(check_architecture, "MAX_CLASS_LINES", 3)
    body = "class Big:\n" + "    x = 1\n" * 4 + "\n\nclass Small:\n    y = 2\n"
    root = package(tmp_path, {"big.py": body})
    assert check_architecture.check(root) == [
        "src/pkg/big.py: 9 lines (a module has at most 5; split it by concern)",
        "src/pkg/big.py:1: class Big is 5 lines (at most 3)",
    ]
    monkeypatch.setattr(check_architecture, "MODULE_EXEMPTIONS", {"pkg.big": "the reason"})
    assert check_architecture.check(root) == ["src/pkg/big.py:1: class Big is 5 lines (at most 3)"]


def test_the_main_exit_status_says_whether_there_are_problems(tmp_path, capsys):
    root = package(tmp_path, {"a.py": "from . import b\n", "b.py": "from . import a\n"})
    assert check_architecture.main(["check", str(root)]) == 1
    out = capsys.readouterr().out
    assert "import cycle: pkg.a" in out
    assert "1 problem(s)" in out


@pytest.mark.parametrize(
    ("module", "level", "target", "resolved"),
    [
        ("pkg.a.b", 1, "c", "pkg.a.c"),
        ("pkg.a.b", 2, None, "pkg"),
        ("pkg.a.b", 0, "pkg.x", "pkg.x"),
    ],
)
def test_relative_imports_resolve_from_the_modules_package(module, level, target, resolved):
    mod = check_architecture.Module(module, Path("x.py"), is_package=False)
    assert check_architecture.resolve(mod, level, target) == resolved


def test_relative_imports_in_a_package_init_resolve_from_the_package_itself():
    init = check_architecture.Module("pkg.a", Path("__init__.py"), is_package=True)
    assert check_architecture.resolve(init, 1, "b") == "pkg.a.b"
