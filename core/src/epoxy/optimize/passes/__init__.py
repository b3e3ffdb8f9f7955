"""The core's graph rewrite passes (``onnx_ir`` in-place passes), one module per pass.

All of them are exact up to float rounding; they rewrite the main graph (not the
subgraphs of control-flow nodes) and only touch patterns whose intermediate values are
read by nothing else. ``builtin.py`` registers them by level.
"""

from .cast_elimination import CastEliminationPass
from .constant_folding import ConstantFoldingPass
from .conv_affine import BatchNormAffineFoldPass, ConvAffineFoldPass
from .conv_bn import ConvBatchNormFoldPass
from .dead_nodes import DeadNodeRemovalPass
from .dropout import DropoutEliminationPass
from .flattened_gemm import FlattenedGemmPass
from .gelu import GeluFusionPass
from .identity import IdentityEliminationPass
from .layer_norm import LayerNormFusionPass
from .legacy_initializers import LegacyInitializerInputsPass
from .lift_constants import LiftConstantsPass
from .matmul_add import MatMulAddToGemmPass
from .matmul_affine import MatMulAffineFoldPass
from .qdq_weights import DequantizeWeightsPass
from .reshape_transpose import ReshapeTransposeSimplifyPass
from .rms_norm import RMSNormFusionPass
from .static_shape import StaticShapePass

__all__ = [
    "BatchNormAffineFoldPass",
    "CastEliminationPass",
    "ConstantFoldingPass",
    "ConvAffineFoldPass",
    "ConvBatchNormFoldPass",
    "DeadNodeRemovalPass",
    "DequantizeWeightsPass",
    "DropoutEliminationPass",
    "FlattenedGemmPass",
    "GeluFusionPass",
    "IdentityEliminationPass",
    "LayerNormFusionPass",
    "LegacyInitializerInputsPass",
    "LiftConstantsPass",
    "MatMulAddToGemmPass",
    "MatMulAffineFoldPass",
    "RMSNormFusionPass",
    "ReshapeTransposeSimplifyPass",
    "StaticShapePass",
]
