"""The model zoo: classical-ML models written by the real exporters (skl2onnx, onnxmltools),
each run by epoxy and by onnxruntime. ``zoo_harness`` holds the check they share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load_openvino_first() -> None:
    """Load OpenVINO and its ONNX frontend before any test imports the boosting libraries.

    A CI run once saw openvino claim nothing in one xdist worker only, while the other worker
    matched the table; the libraries a worker loads first (OpenMP runtimes of lightgbm and
    xgboost, onnxruntime) differ by which tests it draws. Loading OpenVINO's shared libraries
    first makes the order the same in every worker; ``assert_openvino_not_skipped`` and the
    report in the count's failure message say what happened if it recurs."""
    try:
        from openvino.frontend import FrontEndManager
    except ImportError:  # ep-openvino's tests skip themselves
        return
    FrontEndManager().load_by_framework("onnx")


_load_openvino_first()
