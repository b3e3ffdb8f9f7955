"""onnxruntime's own model tools, each reading one model file and writing another: the
transformer optimizer (com.microsoft fused ops), dynamic and static quantization, 4-bit
MatMulNBits, and the session's graph optimizer saving what it runs
(``optimized_model_filepath``: DynamicQuantizeMatMul, FusedConv, FusedMatMul ... appear
only there)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range

#: the quantizers below take 7-bit weights where onnxruntime's uint8 x int8 products saturate
#: (CPUs without VNNI): its documented setting there, and the only one where its own run of the
#: model it wrote is the exact product epoxy computes (onnxruntime_oracle)
CALIBRATION_BATCHES = 4


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The tools' warnings and info logging (the quantizers log through the root logger) kept
    out of the test log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def transformer_optimizer(src: Path, dst: Path, model_type: str, num_heads: int, hidden_size: int) -> None:
    """``onnxruntime.transformers.optimizer.optimize_model`` (its Python fusions, no session)."""
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet():
        optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                       opt_level=0).save_model_to_file(str(dst))


def dynamic_int8(src: Path, dst: Path) -> None:
    """``quantize_dynamic``, int8 weights. ``DefaultTensorType`` lets it quantize after
    com.microsoft ops whose output types onnx's shape inference does not know."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, reduce_range=reduce_range(),
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def matmul_4bits(src: Path, dst: Path, block_size: int = 16) -> None:
    """``MatMulNBitsQuantizer``: MatMul with constant weights -> com.microsoft::MatMulNBits (4 bits)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    with _quiet():
        quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=block_size, is_symmetric=True)
        quantizer.process()
        quantizer.model.save_model_to_file(str(dst))


def static_int8(src: Path, dst: Path, calibration: Callable[[int], dict[str, np.ndarray]], fmt: str) -> None:
    """``quantize_static`` (MinMax calibration over ``CALIBRATION_BATCHES`` seeded feeds from
    ``calibration``, uint8 activations, int8 weights) in the QOperator format (QLinearConv ...)
    or the QDQ format (QuantizeLinear/DequantizeLinear pairs)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches: Iterator[dict[str, np.ndarray]] = iter(map(calibration, range(CALIBRATION_BATCHES)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    with _quiet():
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat[fmt],
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=reduce_range())


def session_optimized(src: Path, dst: Path) -> None:
    """The graph onnxruntime's CPU session runs after its EXTENDED optimizations, saved."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
