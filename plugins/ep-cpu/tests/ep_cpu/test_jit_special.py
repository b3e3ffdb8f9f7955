"""The jit tier's compiled Erf, Gelu (erf form) and Sigmoid loops for small tensors, and the
serial twins of its parallel kernels: same answers as the numpy path and the ONNX reference."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _hostile import one_node
from _jit_cases import close, three_ways

import epoxy
from epoxy_ep_cpu.jit import kernels_normalization, kernels_softmax, kernels_special

numba = pytest.importorskip("numba")

_SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0, 30.0, -30.0, 800.0, -800.0,
            np.inf, -np.inf, np.nan]


def _values(n: int, dtype: type, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype)
    x[: len(_SPECIAL)] = np.array(_SPECIAL, dtype=dtype)[: n]
    return x


@pytest.mark.parametrize("op,attrs,opset", [("Erf", {}, 13), ("Gelu", {}, 20), ("Sigmoid", {}, 13)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (17,), (2, 16, 32), (4, 512)])
def test_small_tensors_match_the_numpy_path_and_the_reference(op, attrs, opset, dtype, shape) -> None:
    size = int(np.prod(shape))
    x = _values(max(size, 1), dtype, size)[:size].reshape(shape) if size else np.zeros(shape, dtype)
    if shape == ():
        x = np.asarray(dtype(0.75))
    jit_on, jit_off, reference = three_ways(one_node(op, [x], attrs, opset=opset))
    rtol = 2e-7 if dtype == np.float32 else 1e-14
    close(jit_on, jit_off, rtol=rtol * 4, atol=rtol)
    # the ONNX reference computes erf in float32 precision even for float64 input
    # (its erf(0.5) is 0.52049988508..., the true value 0.52049987781...)
    close(jit_on, reference, rtol=8e-7, atol=2e-7)


@pytest.mark.parametrize("name", sorted(kernels_special.LOOPS))
def test_the_loops_take_exactly_the_small_contiguous_float_arrays(name: str) -> None:
    run = kernels_special.small(name)
    limit = kernels_special.SMALL[name]
    limit32 = kernels_special.SMALL_F32.get(name, limit)  # float32 loops on fast_math take more
    assert run(np.zeros(limit, np.float64)) is not None
    assert run(np.zeros(limit + 1, np.float64)) is None          # numpy's passes win there
    assert run(np.zeros(limit32, np.float32)) is not None
    assert run(np.zeros(limit32 + 1, np.float32)) is None
    assert run(np.zeros((4, 8), np.float32)[:, ::2]) is None      # strided
    assert run(np.zeros(8, np.float16)) is None                  # other dtypes
    assert run(np.zeros(0, np.float64)).shape == (0,)


def test_serial_twins_compute_what_the_parallel_kernels_compute() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 33, 5)).astype(np.float32)
    a, b = np.empty_like(x), np.empty_like(x)
    kernels_softmax.softmax(x, False, a)
    kernels_softmax.softmax_serial(x, False, b)
    np.testing.assert_array_equal(a, b)
    assert kernels_softmax.softmax_serial.targetoptions.get("parallel") in (None, False)
    x2 = rng.standard_normal((7, 40))
    scale, bias = rng.standard_normal(40), rng.standard_normal(40)
    outs = []
    for kernel in (kernels_normalization.layer_norm, kernels_normalization.layer_norm_serial):
        y, mean, inv = np.empty_like(x2), np.empty(7), np.empty(7)
        kernel(x2, scale, bias, True, 1e-5, y, mean, inv)
        outs.append((y, mean, inv))
    for p, s in zip(*outs):
        np.testing.assert_allclose(p, s, rtol=1e-12)


def test_a_run_with_float_overflow_returns_inf_without_numpy_warnings() -> None:
    """Kernels' fast paths skip np.errstate: the executor runs every step under one."""
    big = np.full((2, 3), np.finfo(np.float32).max, np.float32)
    case = one_node("Add", [big, big], opset=14)
    sess = epoxy.InferenceSession(case.model.SerializeToString(), providers=["cpu"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = sess.run(None, case.feeds)
    assert np.isposinf(y).all()


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at ``exact`` (float64 arrays)."""
    return np.abs(got.astype(np.float64) - exact) / np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)


def test_fast_exp_rounds_to_the_nearest_float32_within_half_an_ulp_and_a_hair() -> None:
    """fast_math.exp, the vectorizable exp under the float32 loops: on a dense grid over the
    whole float32 range of exp (and past it), within 0.51 float32 ulp of the true value (a
    correctly rounded result is within 0.5); infinities, NaN and the overflow/underflow ends
    as numpy gives them."""
    from numba import njit

    from epoxy_ep_cpu.jit.fast_math import exp

    @njit(error_model="numpy")
    def run(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i] = exp(np.float64(x[i]))

    x = np.linspace(-103.0, 88.7, 1_000_003, dtype=np.float32)
    y = np.empty_like(x)
    run(x, y)
    exact = np.exp(x.astype(np.float64))
    normal = exact >= np.finfo(np.float32).tiny
    assert _ulps(y[normal], exact[normal]).max() < 0.51
    assert np.abs(y[~normal] - exact[~normal]).max() <= np.finfo(np.float32).smallest_subnormal
    edges = np.array([np.nan, np.inf, -np.inf, 89.0, 1e30, -104.0, -1e30, 0.0, -0.0], np.float32)
    got = np.empty_like(edges)
    run(edges, got)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, np.exp(edges))


def test_float32_sigmoid_stays_within_half_an_ulp_and_a_hair() -> None:
    x = np.concatenate([np.linspace(-110, 110, (1 << 16) - 5, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)])
    y = kernels_special.small("sigmoid")(x)
    assert y is not None and y.dtype == np.float32
    exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = exact >= np.finfo(np.float32).tiny
    assert _ulps(y[normal], exact[normal]).max() < 0.51
    np.testing.assert_array_equal(y[-5:], np.array([np.nan, 1.0, 0.0, 0.5, 0.5], np.float32))


def test_float32_erf_stays_within_half_an_ulp_and_a_hair() -> None:
    """fast_math's erf (both branches and the switch at |x| = 1)."""
    import math

    x = np.concatenate([np.linspace(-12, 12, 240_001, dtype=np.float32),
                        np.nextafter(np.float32([1, -1]), np.float32(0)), np.float32([1, -1])])
    erf = kernels_special.small("erf")(x)
    exact_erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    nonzero = exact_erf != 0
    assert _ulps(erf[nonzero], exact_erf[nonzero]).max() < 0.51
    edges = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    np.testing.assert_array_equal(kernels_special.small("erf")(edges), np.float32([np.nan, 1, -1, 0, -0.0]))


def test_float32_gelu_stays_within_five_ulp_down_to_the_smallest_normal_results() -> None:
    """gelu_f32 in float32 lanes: within 5 ulp of the true value on a dense grid over the
    whole range where results are normal floats, including GELU's tiny negative values (x =
    -9: -1.0e-18; x = -13: ~1e-37, next to float32's smallest normal) that 0.5 x (1 + erf)
    rounds to -0, and the switch of its erfcx fits at |x| = sqrt 2; mostly within 1 ulp."""
    import math

    edge = np.float32(math.sqrt(2.0))
    x = np.concatenate([np.linspace(-14.5, 14.5, 580_001, dtype=np.float32),
                        np.nextafter(np.float32([edge, -edge]), np.float32(0)), np.float32([edge, -edge])])
    x64 = x.astype(np.float64)
    gelu = kernels_special.small("gelu")(x)
    assert gelu is not None and gelu.dtype == np.float32
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x64])
    normal = np.abs(exact) >= np.finfo(np.float32).tiny
    ulps = _ulps(gelu[normal], exact[normal])
    assert ulps.max() <= 5.0
    assert (ulps <= 1.0).mean() > 0.8
    assert gelu[np.argmin(np.abs(x64 + 9))] < 0  # not rounded to -0
    assert np.abs(gelu[~normal]).max() < np.finfo(np.float32).tiny  # past them: subnormal or -0, never noise
    edges = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    np.testing.assert_array_equal(kernels_special.small("gelu")(edges), np.float32([np.nan, np.inf, np.nan, 0, -0.0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_silu_is_the_sigmoid_loops_value_times_x(dtype) -> None:
    """The fused SiLU's one pass gives the bits of the compiled Sigmoid followed by Mul (the
    graph as exporters write it), NaN, infinities and underflow included."""
    x = (np.random.default_rng(5).standard_normal(1000) * 30).astype(dtype)
    x[:5] = [np.nan, np.inf, -np.inf, -200.0, 0.0]
    silu, sigmoid = kernels_special.small("silu"), kernels_special.small("sigmoid")
    got, gate = silu(x), sigmoid(x)
    assert got is not None and gate is not None and got.dtype == x.dtype
    with np.errstate(invalid="ignore"):
        want = x * gate
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[2])  # -inf * sigmoid(-inf) = -inf * 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("name", "params"), [("hard_swish", (6.0, 0.5)), ("hard_sigmoid", (0.2, 0.5)),
                                              ("hard_sigmoid", (0.3, 0.4))])
def test_hard_activations_in_one_pass_give_the_numpy_passes_bits(name, params, dtype) -> None:
    from epoxy_ep_cpu.ops.activation import hard_sigmoid_into, hard_swish_into

    x = (np.random.default_rng(6).standard_normal(3000) * 6).astype(dtype)
    x[:4] = [np.nan, np.inf, -np.inf, -0.0]
    got = kernels_special.hard(name)(x, *params)
    with np.errstate(invalid="ignore"):
        want = hard_swish_into(x) if name == "hard_swish" else hard_sigmoid_into(x, *params)
    assert got is not None and got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)
    assert kernels_special.hard(name)(x[::2], *params) is None  # strided: the numpy path
    assert kernels_special.hard(name)(np.zeros(kernels_special.SMALL_HARD + 1, dtype), *params) is None


def test_gelu_in_place_overwrites_a_fresh_float32_product_with_the_same_bits() -> None:
    """A fused node's GELU tail writes over its product (vectorized: one array): the same
    bits as the two-array loop; arrays it must not write, or cannot take, are left to the op."""
    y = np.random.default_rng(3).standard_normal((16, 300)).astype(np.float32) * 4
    want = kernels_special.small("gelu")(y)
    run = kernels_special.in_place("gelu")
    got = run(y)
    assert got is y
    np.testing.assert_array_equal(y, want)
    frozen = np.ones((4, 4), np.float32)
    frozen.flags.writeable = False
    assert run(frozen) is None
    assert run(np.ones((4, 4), np.float64)) is None
    assert run(np.ones((4, 8), np.float32)[:, ::2]) is None
