"""sympy (brought in by onnx_ir) stays unloaded until something uses it (epoxy.deferred_imports).

Each check runs in a fresh interpreter: whether sympy is loaded is a property of the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

MODEL = """
from onnx import TensorProto, helper
node = helper.make_node("Relu", ["x"], ["y"])
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
MODEL = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
"""


def _run(code: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k != "EPOXY_EAGER_SYMPY"} | env
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env=full_env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_loading_a_model_with_symbolic_dims_leaves_sympy_unloaded():
    out = _run(MODEL + textwrap.dedent("""
        import sys
        import epoxy
        from epoxy.deferred_imports import is_deferred
        from epoxy.load.loader import load_model
        loaded = load_model(MODEL.SerializeToString())
        dims = [str(d) for d in loaded.model.graph.inputs[0].shape]
        print(dims, is_deferred("sympy"), "sympy.core" in sys.modules)
    """))
    assert out == "['N', '3'] True False"


def test_sympy_loads_at_first_use_through_onnx_ir_and_directly():
    out = _run("""
        import sys
        import epoxy
        import onnx_ir as ir
        from epoxy.deferred_imports import is_deferred
        deferred = sys.modules["sympy"]
        total = ir.SymbolicDim("N") + 1          # onnx_ir's arithmetic needs sympy
        import sympy
        print(str(total), is_deferred("sympy"), sympy is deferred, str(sympy.Symbol("x") * 2))
        from sympy import Rational
        print(Rational(1, 2), type(sympy.Max).__name__ != "")
    """)
    assert out.splitlines() == ["N + 1 False True 2*x", "1/2 True"]


def test_first_use_from_many_threads_loads_once():
    out = _run("""
        import threading
        import epoxy
        import sympy
        from concurrent.futures import ThreadPoolExecutor
        barrier = threading.Barrier(8)
        def first_use(_):
            barrier.wait()
            return sympy.Symbol
        with ThreadPoolExecutor(8) as pool:
            seen = set(map(id, pool.map(first_use, range(8))))
        print(len(seen), sympy.Symbol("y") + 1)
    """)
    assert out == "1 y + 1"


def test_missing_attribute_is_still_an_attribute_error():
    out = _run("""
        import epoxy
        import sympy
        try:
            sympy.no_such_name
        except AttributeError as exc:
            print("AttributeError", "no_such_name" in str(exc))
    """)
    assert out == "AttributeError True"


def test_not_deferred_when_turned_off_or_sympy_came_first():
    off = _run("""
        import sys
        import epoxy
        print(type(sys.modules.get("sympy")).__name__, epoxy.deferred_imports.is_deferred("sympy"))
    """, EPOXY_EAGER_SYMPY="1")
    assert off == "NoneType False"
    first = _run("""
        import sys
        import sympy
        import epoxy
        import onnx_ir
        print(type(sys.modules["sympy"]).__name__, epoxy.deferred_imports.is_deferred("sympy"))
    """)
    assert first == "module False"
