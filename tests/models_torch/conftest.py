"""The torch zoo: models written by torch.onnx (TorchScript and dynamo) and by onnxruntime's
tools, each run by epoxy (cpu, then openvino+cpu) and by onnxruntime. ``torch_harness``
holds the checks; models are exported once per run into a folder the xdist workers share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_cache import ModelStore


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> ModelStore:
    """One folder for the whole run: under xdist each worker's base temp folder sits in the
    run's, which is the one they share."""
    base = tmp_path_factory.getbasetemp()
    return ModelStore((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "torch_zoo_models")
