"""Reliability tests: fuzzing, resource limits, feeds, concurrency, broken providers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
