"""The architecture check (scripts/check_architecture.py) on tiny packages in tmp_path: import cycles at
any scope, modules or classes too long, file-name prefixes shared too often; and, on packages named
parallel_steps, imports that run up the layers, adapters that reach each other or the internals, and
modules flat in the package or in no layer."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "check_architecture.py"
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


# The layers hold for a package named parallel_steps only: the trees below are small ones of that name.
LAYERED = {
    "__init__.py": "from .run.step import run_step\n",
    "parallel_run_step.py": "from . import run_step\nfrom .azure import shim\n",
    "version.py": "VERSION = '1'\n",
    "masking.py": "",
    "summary.py": "",
    "errors.py": "from .masking import mask\nfrom . import summary\n",  # leaves import each other
    "host.py": "from .storage import objects\n",  # one floor with storage
    "storage/__init__.py": "",
    "storage/objects.py": "from ..errors import StepError\n",
    "cluster/__init__.py": "from .. import host\n",
    "store/__init__.py": "",
    "store/runs.py": "from ..storage.objects import read\nfrom ..version import VERSION\n",
    "pool/__init__.py": "from .ray import handle\n",
    "pool/ray/__init__.py": "",
    "pool/ray/handle.py": "from ...store import runs\n",
    "driver/__init__.py": "from ..pool.ray.handle import Handle\n",
    "run/__init__.py": "",
    "run/step.py": "from ..driver import Driver\nimport parallel_steps.store.runs\n",
    "jobs/__init__.py": "from ..run.step import run_step\n",
    "azure/__init__.py": "",
    "azure/shim.py": "from ..jobs import launch\n",
    "azure/pipeline.py": "from ..jobs import launch\nfrom .shim import entry\n",
    "airflow/__init__.py": "",
    "airflow/azure_pipeline.py": "from ..azure.pipeline import read_pipeline\nfrom ..cluster import on_cluster\n",
    "prefect/__init__.py": "",
    "prefect/azure_pipeline.py": "from parallel_steps.azure import pipeline\n",
    "cli/__init__.py": "",
    "cli/pipeline.py": "def main():\n    from ..azure.pipeline import read_pipeline\n",
}


def layered(tmp_path: Path, files: dict[str, str | None]) -> Path:
    """A parallel_steps package: LAYERED, with `files` written over it (None leaves a file out)."""
    root = tmp_path / "src" / "parallel_steps"
    for name, text in {**LAYERED, **files}.items():
        if text is not None:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
    return root


def test_a_clean_layered_tree_passes(tmp_path):
    root = layered(tmp_path, {})
    assert check_architecture.check(root) == []
    assert check_architecture.main(["check", str(root)]) == 0


STORE_UP = "src/parallel_steps/store/runs.py:{line}: imports parallel_steps.run.checks from layer run, above its own layer store (imports run down: run > driver > pool > worker > report > store)"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("from ..run.checks import check_step\n", 1),
        ("import os\n\n\ndef later():\n    import parallel_steps.run.checks\n", 5),
        ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from parallel_steps.run import checks\n", 4),
    ],
    ids=["module level", "inside a function", "under TYPE_CHECKING"],
)
def test_an_import_up_the_layers_is_named_with_its_file_and_line(tmp_path, text, line):
    root = layered(tmp_path, {"store/runs.py": text, "run/checks.py": ""})
    assert check_architecture.check(root) == [STORE_UP.format(line=line)]


def test_every_import_up_the_layers_is_listed_in_line_order(tmp_path):
    text = """\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from ..run.checks import Check


        def later():
            from ..run import checks, plan  # two modules: a line each

        from ..run.checks import Check, Rule  # one module: one line
        """
    root = layered(tmp_path, {"store/runs.py": text, "run/checks.py": "", "run/plan.py": ""})
    plan_up = STORE_UP.format(line=8).replace("run.checks", "run.plan")
    assert check_architecture.check(root) == [
        STORE_UP.format(line=4),
        STORE_UP.format(line=8),
        plan_up,
        STORE_UP.format(line=10),
    ]


def test_importing_the_package_face_from_below_runs_up(tmp_path):
    root = layered(tmp_path, {"control.py": "from parallel_steps import run_step\n"})
    assert check_architecture.check(root) == [
        "src/parallel_steps/control.py:1: imports parallel_steps from layer __init__, above its own layer control"
        " (imports run down: __init__/parallel_run_step > cli/airflow/prefect/azure > jobs > run > driver > pool"
        " > worker > report > store > cluster > config > inputs > storage/host"
        " > errors/control/protocol/summary/masking/version)"
    ]


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("from ..pool.ray import handle\n", "parallel_steps.pool.ray.handle"),
        ("def go():\n    import parallel_steps.driver\n", "parallel_steps.driver"),
    ],
    ids=["pool", "driver, inside a function"],
)
def test_an_adapter_importing_the_internals_is_caught(tmp_path, text, target):
    root = layered(tmp_path, {"airflow/operators.py": text})
    line = text.count("\n")
    assert check_architecture.check(root) == [
        f"src/parallel_steps/airflow/operators.py:{line}: an adapter imports {target} (pool/ and driver/ are"
        " internals; use a package face: parallel_steps.jobs, parallel_steps.cluster, ...)"
    ]


def test_below_the_adapters_the_internals_are_anyone_s(tmp_path):
    root = layered(tmp_path, {"jobs/launch.py": "from ..driver import Driver\nfrom ..pool.ray import handle\n"})
    assert check_architecture.check(root) == []


@pytest.mark.parametrize(
    ("name", "text", "own", "other"),
    [
        ("airflow/tasks.py", "from ..prefect import azure_pipeline\n", "airflow", "prefect"),
        ("cli/airflow.py", "import parallel_steps.airflow.azure_pipeline\n", "cli", "airflow"),
        ("azure/dag.py", "from ..airflow import azure_pipeline\n", "azure", "airflow"),  # azure needs none
    ],
)
def test_adapters_import_each_other_only_to_reach_azure(tmp_path, name, text, own, other):
    root = layered(tmp_path, {name: text})
    (problem,) = check_architecture.check(root)
    assert problem.startswith(f"src/parallel_steps/{name}:1: imports parallel_steps.{other}.")
    assert f"from adapter {other}, a sibling of its own adapter {own} (adapters stand alone" in problem


def test_a_cycle_on_one_floor_is_still_a_cycle(tmp_path):
    root = layered(tmp_path, {"masking.py": "from .errors import StepError\n"})
    assert check_architecture.check(root) == [
        "import cycle: parallel_steps.errors (line 1) -> parallel_steps.masking (line 1) -> parallel_steps.errors"
    ]


def test_a_flat_module_outside_the_faces_leaves_and_host_is_caught(tmp_path):
    root = layered(tmp_path, {"config.py": "from .errors import StepError\n"})  # a layer, but not flat
    assert check_architecture.check(root) == [
        "src/parallel_steps/config.py: flat in parallel_steps/, where only the faces, the leaves and host sit"
        " (move it into its layer's folder)"
    ]


def test_a_module_in_no_layer_is_named_and_its_importers_are_not(tmp_path):
    root = layered(
        tmp_path,
        {
            "helpers/__init__.py": "",
            "helpers/text.py": "from ..errors import StepError\n",
            "run/step.py": "from ..helpers import text\n",
        },
    )
    assert check_architecture.check(root) == [
        "src/parallel_steps/helpers/__init__.py: not in a layer (add it to LAYERS in scripts/check_architecture.py)",
        "src/parallel_steps/helpers/text.py: not in a layer (add it to LAYERS in scripts/check_architecture.py)",
    ]
    root = layered(tmp_path / "flat", {"util.py": ""})
    assert check_architecture.check(root) == [
        "src/parallel_steps/util.py: flat in parallel_steps/, where only the faces, the leaves and host sit"
        " (move it into its layer's folder)",
        "src/parallel_steps/util.py: not in a layer (add it to LAYERS in scripts/check_architecture.py)",
    ]


@pytest.mark.parametrize(
    "names", [("ray.py", "ray_handle.py", "ray_pool.py"), ("ray_actor.py", "ray_handle.py", "ray_pool.py")]
)
def test_three_siblings_sharing_a_prefix_are_a_folder_not_made(tmp_path, names):
    files = {"pool/ray/__init__.py": None, "pool/ray/handle.py": None, "pool/__init__.py": ""}
    root = layered(tmp_path, {**files, **{f"pool/{name}": "" for name in names}})
    assert check_architecture.check(root) == [
        f"src/parallel_steps/pool/: {', '.join(names)} share the prefix ray (a prefix shared by 3 files is a folder"
        " that has not been made: ray/)"
    ]
    root = layered(tmp_path / "two", {**files, **{f"pool/{name}": "" for name in names[1:]}})
    assert check_architecture.check(root) == []


def test_the_prefix_rule_holds_in_any_package_and_skips_dunder_files(tmp_path):
    root = package(tmp_path, {"__main__.py": "", "main_a.py": "", "_main_b.py": ""})  # __main__ not counted
    assert check_architecture.check(root) == []
    root = package(tmp_path, {"main_c.py": ""})
    assert check_architecture.check(root) == [
        "src/pkg/: _main_b.py, main_a.py, main_c.py share the prefix main (a prefix shared by 3 files is a folder"
        " that has not been made: main/)"
    ]


def test_the_layers_name_each_layer_once_and_hold_the_flat_modules_and_adapters():
    names = [name for floor in check_architecture.LAYERS for name in floor]
    assert len(names) == len(set(names))
    assert set(names) >= check_architecture.FLAT_MODULES
    assert set(names) >= set(check_architecture.INTERNALS)
    adapters = set(check_architecture.ADAPTERS)
    assert adapters == {"cli", "airflow", "prefect", "azure"}
    for own, others in check_architecture.ADAPTER_IMPORTS.items():
        assert {own, *others} <= adapters
