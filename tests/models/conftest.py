"""The model zoo: classical-ML models written by the real exporters (skl2onnx, onnxmltools),
each run by epoxy and by onnxruntime. ``zoo_harness`` holds the check they share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
