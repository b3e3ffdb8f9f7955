"""The LLVM-IR kernels' object cache (jit/llvm_module.py): compiled once, then loaded by a later
compile of the same IR on the same CPU; a file that is not object code is compiled over."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import llvm_module  # noqa: E402

_ADD = """define void @bump(float* %p) {{
entry:
  %v = load float, float* %p
  %w = fadd float %v, {amount}
  store float %w, float* %p
  ret void
}}"""

needs_llvm = pytest.mark.skipif(llvm_module.missing(()) is not None, reason=str(llvm_module.missing(())))


def _bump(ir: str, cache_dir) -> float:
    functions = llvm_module.compile_functions(ir, {"bump": [ctypes.c_void_p]}, cache_dir)  # holds the engine
    value = np.zeros(1, dtype=np.float32)
    functions["bump"](value.ctypes.data)
    return float(value[0])


@needs_llvm
def test_object_code_is_kept_and_loaded(tmp_path):
    one, two = _ADD.format(amount="1.0"), _ADD.format(amount="2.0")
    assert _bump(one, tmp_path) == 1.0
    (cached,) = tmp_path.glob("llvm-*.o")
    _bump(two, tmp_path / "other")
    (other,) = (tmp_path / "other").glob("llvm-*.o")
    cached.write_bytes(other.read_bytes())  # the "add 1" module's key now holds "add 2" code
    assert _bump(one, tmp_path) == 2.0  # loaded, not compiled


@needs_llvm
def test_a_file_that_is_not_object_code_is_compiled_over(tmp_path):
    one = _ADD.format(amount="1.0")
    _bump(one, tmp_path)
    (cached,) = tmp_path.glob("llvm-*.o")
    cached.write_bytes(b"not object code")
    assert _bump(one, tmp_path) == 1.0
    assert cached.read_bytes()[:4] in llvm_module._OBJECT_MAGIC


@needs_llvm
def test_an_unwritable_cache_is_passed_over(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would go")
    assert _bump(_ADD.format(amount="1.0"), blocker / "cache") == 1.0
