"""The module path onnxruntime code imports its exceptions from
(``onnxruntime.capi._pybind_state``), renamed: the same classes as :mod:`epoxy.capi`."""

from __future__ import annotations

from . import *  # noqa: F403 - the whole point is re-exporting
from . import __all__  # noqa: F401
