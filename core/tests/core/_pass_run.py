"""Run one optimizer pass on an onnx model as a session would see it (shape-inferred, onnx_ir),
for the pass tests: the rewritten model (checked by the onnx checker) and the pass's count."""

from __future__ import annotations

from typing import Any

import onnx
import onnx_ir as ir


def rewrite(pass_: Any, model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    irm = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model))  # typed, as in a session
    pass_(irm)
    out = ir.serde.serialize_model(irm)
    onnx.checker.check_model(out)
    return out, pass_.count
