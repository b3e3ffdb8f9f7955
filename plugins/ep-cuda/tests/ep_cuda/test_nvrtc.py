"""Every kernel source the provider can emit compiles with NVRTC (no GPU needed).

Needs CuPy and the NVRTC library (``nvidia-cuda-nvrtc`` wheel or a CUDA toolkit); the
tests are skipped with the precise reason when either is missing.
"""

from __future__ import annotations

import functools

import pytest

from epoxy_ep_cuda import codegen, cuda_sources


@functools.lru_cache(maxsize=1)
def _nvrtc():  # type: ignore[no-untyped-def]
    try:
        from cupy.cuda import nvrtc
    except ImportError as exc:
        return None, f"CuPy is not installed ({exc}): pip install cupy-cuda13x"
    try:
        nvrtc.getVersion()
    except Exception as exc:
        return (
            None,
            f"NVRTC library not loadable ({type(exc).__name__}: {str(exc).splitlines()[0]}): "
            "pip install nvidia-cuda-nvrtc",
        )
    return nvrtc, None


def compile_ptx(name: str, source: str, arch: str = "compute_80") -> str:
    nvrtc, reason = _nvrtc()
    if nvrtc is None:
        pytest.skip(reason)
    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", "--std=c++14"])
        except Exception as exc:
            log = nvrtc.getProgramLog(prog)
            raise AssertionError(f"{name} failed to compile: {exc}\n{log}\n{source}") from None
        ptx = nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return ptx.decode() if isinstance(ptx, bytes) else ptx


@pytest.mark.parametrize("name,source", cuda_sources.all_sources(), ids=[n for n, _ in cuda_sources.all_sources()])
def test_hand_written_kernels_compile(name: str, source: str) -> None:
    ptx = compile_ptx(name, source)
    assert f".entry {name}" in ptx


def _ew_cases() -> list[tuple[str, codegen.Program, list[str], list[str], str, int]]:
    cases = []
    attrs = {"alpha": 0.1, "beta": 0.5, "gamma": 1.05, "min": -1.0, "max": 6.0, "approximate": "tanh"}
    for op, (arity, _c, _n) in sorted(codegen.EW_OPS.items()):
        needed = (
            {k: v for k, v in attrs.items()}
            if op in ("LeakyRelu", "Elu", "Selu", "HardSigmoid", "Clip", "Gelu")
            else {}
        )
        prog = codegen.single_op_program(op, arity, needed)
        for dt in ("float32", "float16"):
            cls = ("cbs" * 3)[:arity]
            cases.append((f"{op}_{dt}", prog, [dt] * arity, [dt], cls, 3))
    # loads and stores of every storage type, with literals and multi-instruction programs
    b = codegen.ProgramBuilder(4)
    t = b.add("Where", [("in", 0), ("in", 1), ("in", 2)])
    t = b.add("Mul", [t, ("lit", 0.5)])
    t = b.add("Add", [t, ("in", 3)])
    prog = b.build([t, b.add("Greater", [t, ("lit", 0.0)])])
    cases.append(("mixed", prog, ["bool", "int64", "int32", "float16"], ["float16", "bool"], "bscs", 4))
    cases.append(("mixed_rank1", prog, ["bool", "float32", "float32", "float32"], ["float32", "bool"], "cccc", 1))
    return cases


@pytest.mark.parametrize("case", _ew_cases(), ids=[c[0] for c in _ew_cases()])
def test_generated_elementwise_kernels_compile(case) -> None:  # type: ignore[no-untyped-def]
    _label, prog, in_dt, out_dt, classes, ndim = case
    name, src = codegen.cuda_source(prog, in_dt, out_dt, classes, ndim)
    ptx = compile_ptx(name, src)
    assert f".entry {name}" in ptx


def test_fused_bert_groups_compile_for_hopper() -> None:
    """The exact programs the BERT encoder's fused groups produce, compiled for sm_90."""
    import sys
    from pathlib import Path

    import numpy as np

    root = Path(__file__).resolve().parents[4] / "bench"
    if not (root / "models.py").exists():
        pytest.skip("bench/models.py not in this checkout")
    sys.path.insert(0, str(root))
    import models  # type: ignore[import-not-found]
    from cuda_helpers import run_both

    cfg = dict(hidden=32, heads=2, ffn=64, layers=1, seq=8, vocab=50, max_positions=16, batch=1)
    m = models.build_bert(cfg).SerializeToString()
    _got, _want, p, _s = run_both(m, models.bert_feeds_factory(cfg)(np.random.default_rng(0)))
    seen = 0
    from epoxy_ep_cuda.provider import CudaProvider

    assert isinstance(p, CudaProvider)
    for key, in_dt, out_dt, classes, ndim in p.backend.ew_variants:
        prog = p.backend.programs[key]
        name, src = codegen.cuda_source(prog, list(in_dt), list(out_dt), classes, ndim)
        assert f".entry {name}" in compile_ptx(name, src, "compute_90")
        seen += 1
    assert seen == len(p.backend.ew_variants) > 0


def test_backend_compile_path_gives_cubins() -> None:
    """The one path the GPU backend compiles through (and exports cubins from) gives ELF
    images for this architecture (loading them needs a GPU: test_gpu)."""
    from epoxy_ep_cuda import nvrtc as ep_nvrtc

    _lib, reason = _nvrtc()
    if _lib is None:
        pytest.skip(reason)
    name, source = cuda_sources.im2col_source("float32")
    cubin = ep_nvrtc.compile_cubin(name, source, ep_nvrtc.arch_of("9.0"))
    assert cubin[:4] == b"\x7fELF"
    assert ep_nvrtc.version() != "missing"
