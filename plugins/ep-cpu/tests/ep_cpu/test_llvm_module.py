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


@needs_llvm
def test_lazy_module_compiles_once_at_first_use(tmp_path):
    """Nothing is compiled until a function is asked for; threads asking at once share one
    compilation; the address is the ctypes function's."""
    import threading

    made: list[int] = []
    module = llvm_module.LazyModule("the test kernel", (), lambda: made.append(1) or _ADD.format(amount="3.0"),
                                    {"bump": [ctypes.c_void_p]}, lambda: tmp_path)
    assert made == []
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(module.function("bump"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [1] and len({id(f) for f in got}) == 1
    value = np.zeros(1, dtype=np.float32)
    module.function("bump")(value.ctypes.data)
    assert value[0] == 3.0
    assert module.address("bump") == ctypes.cast(module.function("bump"), ctypes.c_void_p).value


def test_lazy_module_says_why_it_cannot_run():
    """A CPU without a feature the module needs gets a RuntimeError naming the kernel and the
    feature, not a compile."""
    module = llvm_module.LazyModule("the test kernel", ("no-such-feature",), lambda: pytest.fail("compiled"),
                                    {}, lambda: None)
    with pytest.raises(RuntimeError, match="the test kernel cannot run here"):
        module.function("bump")


@needs_llvm
def test_a_later_lazy_module_loads_its_object_code_without_generating_the_ir(tmp_path):
    """A later process's module finds its object code by its name, the sources digest and the
    CPU (``object_path``), so the IR is neither generated nor parsed; a file that is not object
    code is compiled over."""
    made: list[int] = []

    def add_four() -> str:
        made.append(1)
        return _ADD.format(amount="4.0")

    def module() -> llvm_module.LazyModule:  # a fresh one: what a new process builds
        return llvm_module.LazyModule("the test kernel", (), add_four, {"bump": [ctypes.c_void_p]}, lambda: tmp_path)

    def bump(lazy: llvm_module.LazyModule) -> float:
        value = np.zeros(1, dtype=np.float32)
        lazy.function("bump")(value.ctypes.data)
        return float(value[0])

    first = module()
    assert bump(first) == 4.0 and made == [1]
    path = first.object_path(tmp_path)
    assert path.read_bytes()[:4] in llvm_module._OBJECT_MAGIC
    assert bump(module()) == 4.0 and made == [1]  # loaded: no IR made
    path.write_bytes(b"not object code")
    assert bump(module()) == 4.0 and made == [1, 1]
    assert bump(module()) == 4.0 and made == [1, 1]  # the file compiled over is loaded again
