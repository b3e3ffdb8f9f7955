"""The pre-processing every quantization mode starts from: the model simplified exactly.

Quantizing the raw export leaves patterns no runtime fuses: a BatchNormalization after a
quantized Conv keeps a float op (and its own Q/DQ pair) between two integer layers, weight
plumbing (Constant -> Reshape / Transpose of a weight) hides the constant a quantizer needs,
and Dropout / Identity nodes split what would be one QDQ group. Skipping this step is what
halves the speed of onnxruntime's tool when users forget its separate pre-processing script;
here it always runs. The passes are the optimizer's exact ``basic`` simplifications, applied
to the standard-ONNX model (no fused or provider-specific op is introduced), followed by
shape inference so every activation has a type for calibration.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir


def _passes() -> list:
    """The optimizer's exact, standard-ONNX simplifications, in the order it runs them."""
    from epoxy.optimize.passes import (
        BatchNormAffineFoldPass,
        ConstantFoldingPass,
        ConvAffineFoldPass,
        ConvBatchNormFoldPass,
        DeadNodeRemovalPass,
        DropoutEliminationPass,
        IdentityEliminationPass,
        LegacyInitializerInputsPass,
        LiftConstantsPass,
    )

    return [LiftConstantsPass(lift_all_constants=False, size_limit=0), LegacyInitializerInputsPass(),
            IdentityEliminationPass(), DropoutEliminationPass(), ConstantFoldingPass(), ConvBatchNormFoldPass(),
            BatchNormAffineFoldPass(), ConvAffineFoldPass(), DeadNodeRemovalPass()]


def preprocess(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` simplified (a new proto; the caller's is not changed) and the names of the
    passes that changed it. Graph inputs, outputs and their names are kept."""
    ir_model = ir.serde.deserialize_model(model)
    changed = []
    for simplify in _passes():
        result = simplify(ir_model)
        ir_model = result.model
        if result.modified:
            changed.append(getattr(simplify, "name", None) or type(simplify).__name__)
    out = ir.serde.serialize_model(ir_model)
    try:
        out = onnx.shape_inference.infer_shapes(out)
    except Exception:  # noqa: BLE001 - calibration reads types from runs as well
        pass
    return out, changed
