"""The Azure ML worker hook in one process, without a worker: the models laid out where Azure ML's SDK
looks for them, `AZUREML_MODEL_DIR` as Azure sets it, and nothing left once the worker stops."""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from parallel_steps.azure.worker_hook import AzureMLWorkerHook
from parallel_steps.worker.hooks import worker_hooks


@pytest.fixture
def hook(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the shim's finder stays in this test
    for name in ("AML_APP_ROOT", "AZUREML_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    hook = AzureMLWorkerHook()
    yield hook
    hook.worker_stopped()


def spec(models, tmp_path):
    return SimpleNamespace(models=models, metrics_log=str(tmp_path / "metrics.jsonl"))


def test_the_package_registers_the_hook():
    assert any(isinstance(hook, AzureMLWorkerHook) for hook in worker_hooks())


def test_models_are_laid_out_as_azure_ml_does(hook, tmp_path):
    (tmp_path / "mnist").mkdir()
    (tmp_path / "iris.pkl").write_bytes(b"m")
    hook.worker_started(spec({"mnist": str(tmp_path / "mnist"), "iris": str(tmp_path / "iris.pkl")}, tmp_path))
    root = Path(os.environ["AML_APP_ROOT"])
    assert Path(os.environ["AZUREML_MODEL_DIR"]) == root / "azureml-models"  # two models: their common folder
    assert (root / "azureml-models" / "mnist" / "1" / "mnist").resolve() == (tmp_path / "mnist").resolve()
    assert (root / "azureml-models" / "iris" / "1" / "iris.pkl").read_bytes() == b"m"
    hook.worker_stopped()
    assert not root.exists()


def test_one_model_is_its_version_folder(hook, tmp_path):
    (tmp_path / "model").mkdir()
    hook.worker_started(spec({"m": str(tmp_path / "model")}, tmp_path))
    assert Path(os.environ["AZUREML_MODEL_DIR"]).parts[-3:] == ("azureml-models", "m", "1")


def test_no_models_no_folder(hook, tmp_path):
    hook.worker_started(spec({}, tmp_path))
    assert "AML_APP_ROOT" not in os.environ
