"""The Azure ML layer inside a worker, registered as a worker hook (`worker/hooks.py`).

- The step's models are laid out where Azure ML puts them, so `Model.get_model_path(name)`
  finds them with or without the SDK installed: `<root>/azureml-models/<name>/1/<file or folder>`
  (the SDK reads `AML_APP_ROOT/azureml-models`), and `AZUREML_MODEL_DIR` names the model's version
  folder when the step declares one model, else `azureml-models/`, as Azure ML sets it.
- Without `azureml-core`, the shim (`azureml_shim.py`) provides `azureml.core`. With it, the SDK's
  offline run (what `Run.get_context()` returns off Azure, which only prints) writes its log calls
  to the run's metrics log like the shim's, patched when `azureml.core.run` is first imported, so a
  script that never imports the SDK does not pay for it.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import azureml_shim

if TYPE_CHECKING:
    from ..protocol import WorkerSpec

_RUN_MODULE = "azureml.core.run"
#: `_OfflineRun` methods written to the metrics log; the shim's `Run` has the same ones.
_RECORDED = ("log", "log_list", "log_row", "log_table", "log_image", "tag")


class AzureMLWorkerHook:
    """Models where Azure ML looks for them, and `azureml.core`'s run logs in the run's metrics log."""

    def __init__(self) -> None:
        self._models_root: Path | None = None

    def worker_started(self, spec: WorkerSpec) -> None:
        azureml_shim.install(spec.models, spec.metrics_log)
        if spec.models:
            self._models_root = _lay_out_models(spec.models)
        if azureml_shim.real_sdk():
            _record_offline_runs()

    def worker_stopped(self) -> None:
        azureml_shim.close()
        if self._models_root is not None:
            shutil.rmtree(self._models_root, ignore_errors=True)
            self._models_root = None


def _lay_out_models(models: dict[str, str]) -> Path:
    """`azureml-models/<name>/1/<basename>` links to each model, in a folder of this worker's."""
    root = Path(tempfile.mkdtemp(prefix="parallel-steps-models-"))
    folder = root / "azureml-models"
    for name, path in models.items():
        version = folder / name / "1"
        version.mkdir(parents=True)
        (version / Path(path.rstrip("/")).name).symlink_to(path)
    os.environ["AML_APP_ROOT"] = str(root)
    os.environ["AZUREML_MODEL_DIR"] = str(version if len(models) == 1 else folder)
    loaded = sys.modules.get("azureml.core.model")
    if loaded is not None:  # read at import: a worker that imported it already (a reused Ray actor)
        setattr(loaded, "MODELS_DIR", str(folder))  # noqa: B010  # the SDK has no types to check
    return root


def _record_offline_runs() -> None:
    """Patch `_OfflineRun` now if the SDK's run module is loaded, else when it is imported."""
    loaded = sys.modules.get(_RUN_MODULE)
    if loaded is not None:
        _patch(loaded)
    elif not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


class _PatchOnImport:  # a meta path finder (importlib.abc would cost every worker's start ~10 ms)
    """Finds `azureml.core.run` where Python would, and patches it right after it runs."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _RUN_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run_module(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader
        return spec


def _patch(module: types.ModuleType) -> None:
    offline = getattr(module, "_OfflineRun", None)
    if offline is None:  # an SDK version without it: its runs log as it decides
        return
    for method in _RECORDED:
        setattr(offline, method, _recorded(method))


def _recorded(method: str) -> Callable[..., None]:
    def record(self: Any, *args: Any, **kwargs: Any) -> None:
        azureml_shim.record(self.id, method, *args, **kwargs)

    record.__name__ = method
    return record
