"""A cold kernel cache is not a silent pause (jit/compile_notice.py): the first compilation of
one of the tier's kernels in a process logs one warning naming the cache, each compilation an
INFO line with its seconds; kernels loaded from numba's cache, and other packages' numba
functions, say nothing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types

import pytest

numba = pytest.importorskip("numba")

from epoxy_ep_cpu.jit import availability, compile_notice  # noqa: E402


def _twice(x):  # pragma: no cover - compiled
    return x * 2


def _kernel(module: str, *, cache: bool = False):
    """A fresh numba dispatcher over a copy of ``_twice`` whose module is ``module``."""
    fn = types.FunctionType(_twice.__code__, _twice.__globals__, "_twice", None, None)
    fn.__module__ = module
    return numba.njit(cache=cache)(fn)


@pytest.fixture
def notices(monkeypatch, caplog):
    assert availability().available  # installs the listener
    monkeypatch.setattr(compile_notice, "_warned", False)
    caplog.set_level(logging.INFO, logger="epoxy_ep_cpu.jit")
    return caplog


def test_first_compile_warns_once_and_each_logs_its_time(notices):
    assert _kernel("epoxy_ep_cpu.fake_kernels")(3) == 6
    assert _kernel("epoxy_ep_cpu.fake_kernels")(4.0) == 8.0
    warnings = [r for r in notices.records if r.levelno == logging.WARNING]
    infos = [r.getMessage() for r in notices.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "not in the kernel cache" in warnings[0].getMessage()
    assert len(infos) == 2 and all("compiled epoxy_ep_cpu.fake_kernels._twice in" in m for m in infos)


def test_a_kernel_compiling_the_kernels_it_calls_logs_each(notices):
    inner = _kernel("epoxy_ep_cpu.fake_kernels")

    def outer(x):  # pragma: no cover - compiled
        return inner(x) + 1

    outer.__module__ = "epoxy_ep_cpu.fake_kernels"
    assert numba.njit(outer)(3) == 7
    infos = [r.getMessage() for r in notices.records if r.levelno == logging.INFO]
    assert len(infos) == 2 and "fake_kernels._twice" in infos[0] and "fake_kernels." in infos[1], infos
    assert "outer" in infos[1]


def test_other_packages_kernels_say_nothing(notices):
    assert _kernel("somebody_else.kernels")(3) == 6
    assert not notices.records


_CHILD = """
import numpy as np, epoxy
from onnx import helper, TensorProto
graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
(y,) = epoxy.InferenceSession(model, providers=[("cpu", {"jit": "on"})]).run(None, {"x": np.ones((2, 8), np.float32)})
assert abs(float(y.sum()) - 2.0) < 1e-5
"""


def test_a_cold_cache_says_so_once_and_a_warm_one_says_nothing(tmp_path):
    # two processes on one empty kernel cache: the first compiles (and says so), the second loads
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "kernels")}
    env.pop("EPOXY_CPU_JIT", None)
    runs = [subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    assert runs[0].stderr.count("compiling jit kernels that are not in the kernel cache yet") == 1
    assert str(tmp_path / "kernels") in runs[0].stderr
    assert "compiling jit kernels" not in runs[1].stderr
