"""The jit tier's compiled Winograd weight transforms (jit/kernels_winograd_weights.py) against
the exact transform (float64 einsum of G g G^T) and the numpy transforms they replace, and the
provider's use of them: with jit on a 3x3 layer's weights are transformed by the compiled code
at session creation, with jit off by numpy, and both sessions give the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node
from _jit_cases import run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_winograd_weights as compiled  # noqa: E402
from epoxy_ep_cpu.ops import _winograd_f43 as f43_ops  # noqa: E402
from epoxy_ep_cpu.ops import conv as conv_ops  # noqa: E402

RNG = np.random.default_rng(7)
G43 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
G23 = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# (M, C): one kernel, fewer than a block, several blocks with a partial last one
SHAPES = [(1, 1), (5, 7), (33, 40), (64, 64)]


def exact(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    m, c = w.shape[:2]
    return np.einsum("ai,mcij,bj->abmc", g, w.astype(np.float64), g).reshape(len(g) ** 2, m, c)


@pytest.mark.parametrize("m,c", SHAPES)
@pytest.mark.parametrize("name,g,numpy_transform", [("f43_weights", G43, f43_ops.f43_weights),
                                                    ("f23_weights", G23, conv_ops.winograd_weights)])
def test_compiled_transform_is_the_exact_one_rounded(m, c, name, g, numpy_transform):
    w = (RNG.standard_normal((m, c, 3, 3)) * 3).astype(np.float32)
    got = getattr(compiled, name)(w)
    want = exact(w, g)
    assert got.dtype == np.float32 and got.shape == want.shape and got.flags.c_contiguous
    # float64 arithmetic, one float32 rounding: within half a float32 step (plus float64 noise)
    step = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - want) <= 0.5 * step + 1e-12 * np.abs(want))
    np.testing.assert_allclose(got, numpy_transform(w), rtol=2e-6, atol=1e-6)


def test_compiled_transform_reads_non_contiguous_weights():
    w = (RNG.standard_normal((6, 10, 3, 3))).astype(np.float32)[:, ::2]
    np.testing.assert_array_equal(compiled.f43_weights(w), compiled.f43_weights(np.ascontiguousarray(w)))


@pytest.mark.parametrize("shape,m,tile", [((1, 64, 40, 40), 64, 4), ((1, 48, 12, 12), 96, 2)])
@pytest.mark.usefixtures("no_small_conv")  # 12x12 maps: the row-gathered kernel's otherwise
def test_provider_transforms_with_the_compiled_code_when_jit_is_on(monkeypatch, shape, m, tile):
    if tile == 2:  # route the layer to the jit tier's F(2x2, 3x3) (as test_jit_winograd does)
        monkeypatch.setattr(conv_ops, "use_f43_jit", lambda *a: False)
        monkeypatch.setattr(conv_ops, "_F43_JIT_MIN_TILES", 1 << 30)
        monkeypatch.setattr(conv_ops, "_F23_JIT_MIN_PAIR_POSITIONS", {1: 0, 2: 0})
        monkeypatch.setattr(conv_ops, "_F23_JIT_MIN_POSITIONS_THREADS", 0)
        monkeypatch.setattr(conv_ops, "use_f43", lambda *a, **k: False)
    calls: list[str] = []
    for home, name in ((compiled, "f43_weights"), (compiled, "f23_weights"), (conv_ops, "f43_weights"),
                       (conv_ops, "winograd_weights")):
        real = getattr(home, name)
        label = f"{home.__name__.rsplit('.', 1)[-1]}.{name}"

        def spy(v, real=real, label=label):
            calls.append(label)
            return real(v)

        monkeypatch.setattr(home, name, spy)
    w = (RNG.standard_normal((m, shape[1], 3, 3)) * 0.1).astype(np.float32)
    x = RNG.standard_normal(shape).astype(np.float32)
    case = one_node("Conv", [x, In(w, const=True)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    on = run_cpu(case, True)
    jit_calls = list(calls)
    calls.clear()
    off = run_cpu(case, False)
    assert jit_calls and all(c.startswith("kernels_winograd_weights.") for c in jit_calls), jit_calls
    assert not any(c.startswith("kernels_winograd_weights.") for c in calls), calls
    if tile == 4:  # the numpy path runs this layer by F(4,3) too, with numpy's transform
        assert calls == ["conv.f43_weights"], calls
    np.testing.assert_allclose(on[0], off[0], rtol=1e-4, atol=1e-4 * float(np.abs(off[0]).max()))
