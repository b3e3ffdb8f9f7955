"""The fuzz harness's modules import each other by name (fuzz.py runs as a script)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
