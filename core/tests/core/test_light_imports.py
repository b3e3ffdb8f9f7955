"""``import epoxy`` and the provider registry (``epoxy providers``) load neither onnx_ir nor
the session: onnx_ir brings sympy (~0.2 s) that only building a session needs."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import epoxy
from epoxy.cli.main import build_parser
from epoxy.plugins import default_registry
default_registry().entries()
build_parser()
heavy = sorted(m for m in ("onnx_ir", "epoxy.session", "epoxy.optimize.pipeline") if m in sys.modules)
print(",".join(heavy))
"""


def test_registry_and_cli_parser_stay_light():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_lazy_names_still_resolve():
    import epoxy
    from epoxy.optimize import LEVEL_ORDER, optimize

    assert epoxy.InferenceSession.__name__ == "InferenceSession" and epoxy.NodeArg.__name__ == "NodeArg"
    assert callable(optimize) and "basic" in LEVEL_ORDER
    try:
        epoxy.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("unknown attribute did not raise")
