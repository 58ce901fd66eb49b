"""Shipping entry functions: by reference when a worker's interpreter would import their module from the
same file, by value when it would not (a DAG file, a flow file, a notebook); errors name the function.

A worker is played by this process after the module is made unimportable (gone from sys.modules and
from the path): a payload by value still loads, one by reference cannot."""

from __future__ import annotations

import pickle
import sys
import threading
import uuid
from pathlib import Path

import cloudpickle
import pytest

from parallel_steps import ConfigError
from parallel_steps.worker.shipping import dumps_callables, importable, ship_functions


def worker_path(*without: Path) -> tuple[str, ...]:
    """Where a worker finds modules: this process's path less the folders only it has."""
    return tuple(p for p in sys.path if p not in {str(folder) for folder in without})


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch):
    """A module in a folder only this process has on its path (as Airflow adds the DAG folder)."""
    name = f"flowfile_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "PREFIX = 'seen'\n\ndef run(mini_batch):\n    return [f'{PREFIX}:{x}' for x in mini_batch]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module
    sys.modules.pop(name, None)


def as_a_worker_loads(payload: bytes, module, folder: Path) -> dict:
    """Load the payload where the module cannot be imported."""
    sys.modules.pop(module.__name__, None)
    sys.path.remove(str(folder))
    return pickle.loads(payload)


def test_a_function_the_workers_cannot_import_travels_by_value(user_module, tmp_path):
    payload = dumps_callables({"init": None, "run": user_module.run, "shutdown": None}, worker_path(tmp_path))
    functions = as_a_worker_loads(payload, user_module, tmp_path)
    assert functions["run"]([1, 2]) == ["seen:1", "seen:2"]
    assert functions["init"] is None


def test_a_function_the_workers_can_import_travels_by_reference(user_module, tmp_path):
    payload = dumps_callables({"run": user_module.run}, worker_path())
    with pytest.raises(ModuleNotFoundError):
        as_a_worker_loads(payload, user_module, tmp_path)


def test_shipping_leaves_cloudpickles_registry_as_it_was(user_module, tmp_path):
    before = set(cloudpickle.list_registry_pickle_by_value())
    dumps_callables({"run": user_module.run}, worker_path(tmp_path))
    assert set(cloudpickle.list_registry_pickle_by_value()) == before


def test_what_a_fresh_interpreter_imports(user_module, tmp_path):
    assert importable(pickle, worker_path(tmp_path))
    assert importable(sys, ())  # built in
    assert not importable(user_module, worker_path(tmp_path))
    assert importable(user_module, (str(tmp_path),))
    assert not importable(sys.modules["__main__"], sys.path)


def test_a_function_that_cannot_be_pickled_is_named():
    lock = threading.Lock()

    def shutdown():
        with lock:
            pass

    with pytest.raises(ConfigError, match=r"^shutdown: cannot be shipped to the workers with cloudpickle") as error:
        ship_functions(len, None, shutdown)
    assert "create them in init=" in str(error.value)
    assert "\n" not in str(error.value)


def test_no_function_means_the_entry_script_runs():
    assert ship_functions(None) is None


def test_init_or_shutdown_without_run_is_named():
    with pytest.raises(ConfigError, match=r"^run: init= and shutdown= need run="):
        ship_functions(None, init=print)


def test_a_value_that_is_not_a_function_is_named():
    with pytest.raises(ConfigError, match=r"^init: expected a function, got str"):
        ship_functions(len, init="load_model")
