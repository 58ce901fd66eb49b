"""The `azureml.core` names ParallelRunStep entry scripts use, provided inside workers.

- `Model.get_model_path(name)`: the local path of a model the step declares (`models:`).
- `Run.get_context()`: an offline run whose `log`, `log_list`, `log_row`, `log_table`,
  `log_image` and `tag` calls are written to the run's logs
  (`logs/user/metrics/<node>/processNNN.jsonl`) and counted in the summary (`metrics_logged`).

Installed by the Azure ML worker hook (`worker_hook.py`), only inside workers, and only
when `azureml.core` itself cannot be imported, so the real SDK always wins (its offline run's
log calls then go to the same file, through `record`). Any other `azureml` module or name
fails with one line saying it is not provided.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

_MODULES = ("azureml", "azureml.core", "azureml.core.model", "azureml.core.run")
_PROVIDES = "parallel-steps provides azureml.core's Model.get_model_path and Run.get_context in workers"


@dataclass
class _Worker:
    """What `install` was given: the step's models (local paths) and this worker's metrics file."""

    models: dict[str, str] = field(default_factory=dict)
    metrics_log: str | None = None
    file: TextIO | None = None  # the metrics file, opened at the first log call


_worker = _Worker()


class ModelNotFoundError(LookupError):
    """`Model.get_model_path` was asked for a model the step does not declare."""


def _not_provided(name: str) -> str:
    return f"{name} is not provided ({_PROVIDES}; install the Azure ML SDK for the rest)"


class Model:
    """`azureml.core.Model` as far as entry scripts use it: `Model.get_model_path(name)`."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise ImportError(_not_provided("azureml.core.Model(...)"))

    @staticmethod
    def get_model_path(model_name: str, version: int | None = None, _workspace: Any = None) -> str:
        """The local path of the model `model_name` declared in the step's `models:` (the file of a
        single-file model, else its folder). `version` is accepted and not checked: the step names
        exactly one path per model."""
        try:
            return _worker.models[model_name]
        except KeyError:
            declared = ", ".join(sorted(_worker.models)) or "none"
            raise ModelNotFoundError(
                f"model {model_name!r} is not declared by the step (declared: {declared}); add it under models:"
            ) from None


class Run:
    """An offline run, what `Run.get_context()` gives; its log calls go to the run's logs, one JSON line each."""

    _context: Run | None = None

    def __init__(self, run_id: str):
        self.id = run_id

    @classmethod
    def get_context(cls, allow_offline: bool = True, **_: Any) -> Run:
        """This worker's run (one per worker, as the real `Run.get_context()` returns one per process)."""
        if cls._context is None:
            node, process = (
                os.environ.get("PARALLEL_STEPS_NODE_INDEX", "0"),
                os.environ.get("PARALLEL_STEPS_PROCESS_NAME", ""),
            )
            cls._context = cls(f"OfflineRun_node{node}_{process or os.getpid()}")
        return cls._context

    def log(self, name: str, value: Any, description: str = "") -> None:
        self._write("log", name, value, description)

    def log_list(self, name: str, value: Any, description: str = "") -> None:
        self._write("log_list", name, list(value), description)

    def log_row(self, name: str, description: str | None = None, **kwargs: Any) -> None:
        self._write("log_row", name, kwargs, description or "")

    def log_table(self, name: str, value: dict[str, Any], description: str = "") -> None:
        self._write("log_table", name, value, description)

    def log_image(self, name: str, path: str | None = None, plot: Any = None, description: str = "") -> None:
        """Records the image file's path (a matplotlib `plot` is recorded by its description only)."""
        self._write("log_image", name, path, description)

    def tag(self, key: str, value: Any = None) -> None:
        self._write("tag", key, value, "")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(_not_provided(f"azureml.core.Run.{name}"))

    def _write(self, kind: str, name: str, value: Any, description: str) -> None:
        if _worker.file is None:
            path = _worker.metrics_log
            if path is None:
                raise RuntimeError("Run.get_context() logs only inside a parallel-steps worker")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _worker.file = open(path, "a", encoding="utf-8")
        record = dict(time=time.time(), run=self.id, kind=kind, name=name, value=value, description=description)
        _worker.file.write(json.dumps(record, default=str) + "\n")
        _worker.file.flush()  # metrics are rare; a crash must not lose them


if TYPE_CHECKING:
    import importlib.abc

    class _FinderBase(importlib.abc.MetaPathFinder, importlib.abc.Loader): ...

else:
    _FinderBase = object  # importlib.abc (with importlib.resources) costs every worker's start ~10 ms


class _Finder(_FinderBase):
    """Provides the shim's modules when nothing else on sys.path does; refuses the rest of `azureml`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "azureml" and not fullname.startswith("azureml."):
            return None
        if fullname not in _MODULES:
            raise ModuleNotFoundError(_not_provided(fullname), name=fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in ("azureml", "azureml.core"))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ != "azureml":
            module.__dict__.update(Model=Model, Run=Run)
        module.__dict__["__getattr__"] = _module_getattr(module.__name__)


def _module_getattr(module: str) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(_not_provided(f"{module}.{name}"), name=module)

    return __getattr__


def install(models: dict[str, str], metrics_log: str | None) -> None:
    """Give this worker's entry script `azureml.core` (unless the real one is installed)."""
    close()
    _worker.models, _worker.metrics_log = dict(models), metrics_log
    Run._context = None
    if any(isinstance(finder, _Finder) for finder in sys.meta_path) or real_sdk():
        return
    sys.meta_path.append(_Finder())  # last: only what no other finder provides


def record(run_id: str, method: str, *args: Any, **kwargs: Any) -> None:
    """Write one `Run` log call (`method`: log, log_row, tag, ...) of the run `run_id` to the metrics file."""
    getattr(Run(run_id), method)(*args, **kwargs)


def close() -> None:
    """Close the metrics file (the worker is done)."""
    if _worker.file is not None:
        _worker.file.close()
        _worker.file = None


def real_sdk() -> bool:
    """Whether Azure ML's own `azureml.core` is installed (found on sys.path, not by the shim)."""
    try:
        spec = importlib.util.find_spec("azureml.core")
    except ImportError:  # no `azureml` at all
        return False
    return spec is not None and not isinstance(spec.loader, _Finder)
