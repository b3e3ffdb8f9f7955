"""``jit/direct.py``: a kernel's compiled overload looked up once for a prepared call, one
overload for read-only and writable arrays alike (a second compile of the same kernel cost
seconds of a cold first run)."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from epoxy_ep_cpu.jit import direct, native_shares  # noqa: E402


@numba.njit(nogil=True)
def _scaled_into(x, scale, out, first, last):  # pragma: no cover - compiled
    for i in range(first, last):
        out[i] = x[i] * scale[i]


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def test_a_read_only_input_shares_the_writable_inputs_overload():
    x = np.arange(6, dtype=np.float32)
    scale = _read_only(np.full(6, 2.0, np.float32))  # as a bias viewing a model's bytes is
    out = np.zeros(6, np.float32)
    types = direct.argument_types((x, scale, out, 0, 6))
    assert all(t.mutable for t in types[:3])
    fn = direct.overload(_scaled_into, (x, scale, out, 0, 6))
    fn(x, scale, out, 0, 6)
    np.testing.assert_array_equal(out, x * 2)
    again = direct.overload(_scaled_into, (x, np.full(6, 3.0, np.float32), out, 0, 6))
    again(x, np.full(6, 3.0, np.float32), out, 0, 6)
    np.testing.assert_array_equal(out, x * 3)
    assert len(_scaled_into.overloads) == 1  # one compile for both


def test_a_share_address_is_the_same_overload():
    x = _read_only(np.arange(4, dtype=np.float32))
    out = np.zeros(4, np.float32)
    direct.overload(_scaled_into, (x, x, out, 0, 4))
    before = len(_scaled_into.overloads)
    assert native_shares.compiled_address(_scaled_into, (x, x, out)) > 0
    assert len(_scaled_into.overloads) == before


def test_an_array_of_another_dtype_is_still_refused():
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    fn = direct.overload(_scaled_into, (x, x, out, 0, 4))
    with pytest.raises(TypeError):
        fn(x.astype(np.float64), x, out, 0, 4)


_SMALL_CNN = r"""
import pkgutil, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import epoxy
import epoxy_ep_cpu.jit as jit
from numba.core import types
from numba.core.registry import CPUDispatcher

rng = np.random.default_rng(0)
def init(name, *shape, low=-1.0):
    return numpy_helper.from_array(rng.uniform(low, 1.0, shape).astype(np.float32), name)
inits = []
nodes = []
value = "x"
# each kind of layer twice: its bias the model's own (a read-only constant), then none (the
# kernel's own zeros, writable)
for i, (k, c, m, stride) in enumerate([(1, 64, 64, 1), (1, 64, 64, 1), (3, 64, 64, 1), (3, 64, 64, 1),
                                       (3, 64, 128, 2), (3, 128, 128, 2)]):
    inits.append(init(f"w{i}", m, c, k, k))
    bias = [f"b{i}"] if i % 2 == 0 else []
    inits += [init(f"b{i}", m)] if bias else []
    nodes += [helper.make_node("Conv", [value, f"w{i}", *bias], [f"c{i}"], pads=[k // 2] * 4, strides=[stride] * 2),
              helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    value = f"r{i}"
nodes.append(helper.make_node("GlobalAveragePool", [value], ["y"]))
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 1, 1])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
for threads in (1, 2):
    session = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": threads})])
    session.run(None, {"x": x})
twice = []
for info in pkgutil.iter_modules(jit.__path__):
    module = sys.modules.get("epoxy_ep_cpu.jit." + info.name)
    for name, value in (vars(module) if module is not None else {}).items():
        if isinstance(value, CPUDispatcher):
            kinds = [tuple(t.copy(readonly=False) if isinstance(t, types.Array) else t for t in sig)
                     for sig in value.signatures]
            if len(set(kinds)) != len(kinds):
                twice.append(f"{info.name}.{name}")
print("twice:", sorted(set(twice)))
"""


def test_a_model_compiles_no_kernel_twice_for_a_read_only_argument():
    """A small CNN whose layers come in pairs on one kernel, one with the model's bias (a
    read-only constant) and one without (the kernel's writable zeros), on one and two
    threads: no kernel holds two overloads that differ only in an argument's read-only flag
    (without ``argument_types``: the row GEMM, the pointwise GEMM and the Winograd output
    transform here; densenet121 compiled three kernels twice that way, bench/README.md,
    session 51). A fresh process, whose kernels are only this model's."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SMALL_CNN], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "twice: []"
