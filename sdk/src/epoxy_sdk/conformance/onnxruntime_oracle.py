"""Where onnxruntime, the usual oracle, computes uint8 x int8 products exactly on this CPU.

On x86 CPUs without AVX512-VNNI (AVX2, plain AVX-512), onnxruntime's uint8 x int8 kernels add
each pair of neighbouring products in int16 with saturation (``vpmaddubsw``): where
``a0*b0 + a1*b1`` leaves [-32768, 32767] the sum is clipped, so its MatMulInteger,
QLinearConv, QLinearMatMul, QGemm, QAttention and DynamicQuantize* outputs (and the QDQ
models it fuses into them) differ from the exact product: a MatMulInteger of 255s by -128s
gives -32768 a pair instead of -65280. onnxruntime's documentation prescribes 7-bit weights
on such CPUs (its quantizers' ``reduce_range``). epoxy's providers compute the exact product,
so a test that takes onnxruntime as the oracle of a uint8 x int8 product draws int8 weights
from [-64, 63] where onnxruntime saturates (no pair leaves int16 then: 2 * 255 * 64 = 32640)
and from the whole range elsewhere (VNNI CPUs, ARM); a test with an exact reference keeps
the whole range and skips only its comparison with onnxruntime.
"""

from __future__ import annotations

import functools

import numpy as np

#: int8 weights no pair of uint8 x int8 products can saturate int16 with
SEVEN_BIT = (-64, 63)


@functools.cache
def onnxruntime_saturates_u8s8() -> bool:
    """Probe once: onnxruntime's MatMulInteger of 255s by -128s (constant weights) against
    the exact product."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    a = np.full((2, 32), 255, np.uint8)
    b = np.full((32, 4), -128, np.int8)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "saturation_probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 4])],
                              initializer=[numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"a": a})[0]
    return not np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def int8_weight_range() -> tuple[int, int]:
    """Inclusive bounds of int8 weight codes onnxruntime multiplies exactly by uint8 here."""
    return SEVEN_BIT if onnxruntime_saturates_u8s8() else (-128, 127)


def weight_codes(rng: np.random.Generator, dtype: type, shape: tuple[int, ...],
                 activation: type = np.uint8) -> np.ndarray:
    """Uniform random weight codes: the whole range of ``dtype``, but int8 weights of uint8
    activations within :func:`int8_weight_range` (the products onnxruntime gets right here)."""
    u8s8 = dtype == np.int8 and activation == np.uint8
    low, high = int8_weight_range() if u8s8 else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return rng.integers(low, high + 1, shape).astype(dtype)


def reduce_range() -> bool:
    """``reduce_range`` for onnxruntime's quantizers: 7-bit weights where its uint8 x int8
    products saturate, as its documentation prescribes for such CPUs."""
    return onnxruntime_saturates_u8s8()
