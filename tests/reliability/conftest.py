"""Reliability tests: resource limits, feeds, concurrency, broken providers (the fuzzer is
tests/fuzz, whose seed models some of these tests reuse)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))  # seeds.py
