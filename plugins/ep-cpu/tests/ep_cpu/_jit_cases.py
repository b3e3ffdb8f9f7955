"""Shared by the jit tests: run one-node models on the cpu provider with ``jit`` on and off."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from _hostile import Case, options, run_reference

import epoxy


def run_cpu(case: Case, jit: bool, *, runs: int = 1, **provider_options: Any) -> list[np.ndarray]:
    """``case`` on the cpu provider with ``jit`` (and any other provider options); with
    ``runs`` > 1 the session runs the feeds again, and every run must give the first's
    values exactly (a shape's later runs may take prepared calls, e.g. ``Conv2dCall``)."""
    opts = {"jit": jit, **provider_options}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the numpy path's NaN warnings
        sess = epoxy.InferenceSession(case.model.SerializeToString(), options(None), providers=[("cpu", opts)])
        first = [np.asarray(v) for v in sess.run(None, case.feeds)]
        for _ in range(runs - 1):
            again = [np.asarray(v) for v in sess.run(None, case.feeds)]
            for a, b in zip(first, again):
                np.testing.assert_array_equal(b, a, err_msg="a later run of the same feeds differs from the first")
        return first


def three_ways(case: Case, reference_case: Case | None = None
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """jit on, jit off (the numpy path), the ONNX reference (on ``reference_case`` if given)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = run_reference(reference_case or case)
    return run_cpu(case, True), run_cpu(case, False), reference


def close(got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> None:
    """Same count, shapes and dtypes; values equal within tolerance, NaN where NaN."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def conv_float64(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """A 2-D group-1 convolution in float64 and the bound on a float32 sum of its terms in any
    order: ``K = C * kh * kw`` ulps of the sum of the products' magnitudes."""
    sh, sw = attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs.get("pads", (0, 0, 0, 0))
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    mag = np.zeros_like(y)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j].astype(np.float64))
            mag += np.einsum("nchw,mc->nmhw", np.abs(win), np.abs(w[:, :, i, j].astype(np.float64)))
    return y + b[None, :, None, None], (mag + np.abs(b)[None, :, None, None]) * c * kh * kw * 2.0 ** -23 + 1e-30


def conv_out_shape(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]) -> tuple[int, ...]:
    """The output shape of a 2-D convolution case (pads, strides, dilations from ``attrs``)."""
    sh, sw = attrs.get("strides", (1, 1))
    dh, dw = attrs.get("dilations", (1, 1))
    pt, pl, pb, pr = attrs.get("pads", (0, 0, 0, 0))
    oh = (x_shape[2] + pt + pb - (w_shape[2] - 1) * dh - 1) // sh + 1
    ow = (x_shape[3] + pl + pr - (w_shape[3] - 1) * dw - 1) // sw + 1
    return (x_shape[0], w_shape[0], oh, ow)


def spy_calls(monkeypatch: Any, cls: type, check: Any = None) -> list[tuple[int, ...]]:
    """The input shapes of every call of the prepared conv call class ``cls`` (``check(call)``
    first, when given), collected in the returned list."""
    seen: list[tuple[int, ...]] = []
    real = cls.__call__

    def counted(self: Any, x: np.ndarray, z: Any) -> np.ndarray:
        if check is not None:
            check(self)
        seen.append(x.shape)
        return real(self, x, z)

    monkeypatch.setattr(cls, "__call__", counted)
    return seen


def case_ids(cases: list[tuple[Any, ...]]) -> list[str]:
    """pytest ids for ``(x shape, w shape, attributes)`` convolution cases."""
    return [f"{c[0]}-{c[1]}-{sorted(c[2].items())}" for c in cases]


def conv_data(seed: int, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Float32 input, weight and bias of a convolution case, from ``seed``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[0]).astype(np.float32))


def small_layers_sum_as_blas(monkeypatch: Any) -> None:
    """Tests comparing a constant-weight convolution's bits with the runtime-weight (numpy,
    OpenBLAS) path's: the small-layer kernel (``kernels_conv_small``) sums each output over K in
    order, one fma a step, as OpenBLAS's AVX-512 kernels do for such shapes but not its Haswell
    ones (AVX2 CPUs). There the constant weights leave the small kernel to BLAS too, so both
    sides sum alike; the small kernel is checked against float64 in test_jit_conv_small."""
    try:
        from epoxy_ep_cpu.jit import kernels_conv_small, sgemm_ir
    except ImportError:  # no numba: no small kernel either
        return
    if not sgemm_ir.WIDE_TILE:
        monkeypatch.setattr(kernels_conv_small, "gains", lambda *args, **kwargs: False)
