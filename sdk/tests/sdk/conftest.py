"""The kit's tests run pytest in process with conftests that swap the process-wide provider
registry; put the real one back after each test so later suites in the same run see it."""

from __future__ import annotations

import onnx  # noqa: F401  # see below
import onnx_ir  # noqa: F401  # see below
import pytest

import epoxy.session  # noqa: F401  # see below
from epoxy import plugins
from epoxy.aot import capture  # noqa: F401  # see below
from epoxy.optimize import passes  # noqa: F401  # see below

# pytester's in-process runs drop the modules first imported inside them, and onnx's C
# extension aborts the process when imported a second time: import it once, out here, so a
# file of kit tests run alone (the kit imports onnx) does not crash on its second run. The
# same for onnx_ir and the optimizer's passes: imported anew after a pytester run, their
# classes are new ones and the passes' isinstance checks fail on values made by the old.
# The same for the session and epoxy.aot.capture: ``epoxy.InferenceSession`` stays the first
# run's class, so a capture module imported anew records nothing from its sessions.


@pytest.fixture(autouse=True)
def _restore_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugins, "_default_registry", plugins._default_registry)
