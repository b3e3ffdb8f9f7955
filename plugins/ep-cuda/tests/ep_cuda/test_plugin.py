"""The package imports without CuPy side effects and lists itself unavailable here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cuda_helpers import gpu_unavailable_reason

from epoxy.contract import ProviderUnavailable
from epoxy.errors import InvalidArgumentError
from epoxy.plugins import ProviderRegistry
from epoxy_ep_cuda.options import parse_memory_limit, parse_options

no_gpu = pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is usable here")


def _py(code: str) -> str:
    # the device probe imports CuPy (seconds); on a loaded 2-core CI box the default 10 s
    # enumeration timeout was seen to expire, which would test the load, not the plugin
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "EPOXY_STRICT_PLUGINS": "", "EPOXY_DEVICE_TIMEOUT": "120"}).stdout


def test_import_does_not_import_cupy() -> None:
    out = _py("import sys, epoxy_ep_cuda, epoxy_ep_cuda.plugin, epoxy_ep_cuda.factory, epoxy_ep_cuda.ops_table, "
              "epoxy_ep_cuda.capability, epoxy_ep_cuda.provider, epoxy_ep_cuda.iobinding; "
              "epoxy_ep_cuda.ops_table.load(); print('cupy' in sys.modules)")
    assert out.strip() == "False"


def test_entry_point_registered() -> None:
    reg = ProviderRegistry()
    entry = reg.get("cuda")
    assert entry is not None, reg.failures
    assert entry.distribution == "epoxy-ep-cuda"
    assert entry.factory.priority > reg.get("cpu").factory.priority


@no_gpu
def test_lists_itself_unavailable_with_reason() -> None:
    data = json.loads(_py("import sys; from epoxy.cli.main import main; sys.exit(main(['providers', '--json']))"))
    cuda = next(p for p in data["providers"] if p["name"] == "cuda")
    assert cuda["available"] is False
    reason = cuda["unavailable_reason"]
    assert any(w in reason for w in ("CuPy is not installed", "driver", "no CUDA-capable GPU")), reason
    assert not [f for f in data["failed_plugins"] if f["plugin"] == "cuda"]


@no_gpu
def test_devices_raise_provider_unavailable() -> None:
    from epoxy_ep_cuda.factory import CudaProviderFactory

    with pytest.raises(ProviderUnavailable):
        CudaProviderFactory().devices()


def test_missing_cupy_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from epoxy_ep_cuda import _cuda

    real = builtins.__import__

    def fake_import(name: str, *a, **k):  # type: ignore[no-untyped-def]
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    with pytest.raises(ProviderUnavailable, match="CuPy is not installed.*epoxy-ep-cuda\\[cuda13\\]"):
        _cuda.import_cupy()


@no_gpu
def test_session_falls_back_to_cpu() -> None:
    from cuda_helpers import model
    from onnx import helper

    import epoxy

    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros((2, 3), np.float32)}, ["y"])
    with pytest.warns(RuntimeWarning, match="provider 'cuda' skipped"):
        s = epoxy.InferenceSession(m, providers=["cuda", "cpu"])
    assert s.get_providers() == ["cpu"]
    np.testing.assert_array_equal(s.run(None, {"x": -np.ones((2, 3), np.float32)})[0], 0)


def test_options() -> None:
    assert parse_options({}).fuse is True
    o = parse_options({"cuda_graph": "1", "memory_limit": "2GB", "fuse": False})
    assert o.cuda_graph is True and o.fuse is False
    with pytest.raises(InvalidArgumentError, match="unknown options"):
        parse_options({"bogus": 1})
    with pytest.raises(InvalidArgumentError):
        parse_options({"memory_limit": "lots"})
    assert parse_memory_limit("512MiB", 0) == 512 << 20
    assert parse_memory_limit(0.5, 1000) == 500
    assert parse_memory_limit(1 << 30, 0) == 1 << 30


def test_supported_ops_listing() -> None:
    from epoxy_ep_cuda.factory import CudaProviderFactory

    ops = {o.op_type for o in CudaProviderFactory().supported_ops()}
    assert {"MatMul", "Gemm", "Conv", "LayerNormalization", "Softmax", "Erf", "Gather", "Reshape"} <= ops
