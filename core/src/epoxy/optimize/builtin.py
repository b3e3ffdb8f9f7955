"""The core's own passes, registered through the same hook as plugins' passes.

Levels (they nest): ``basic`` passes are exact simplifications every provider benefits
from (eliminations, constant folding of weight plumbing, folding affine ops into Conv /
BatchNormalization weights, MatMul+Add -> Gemm); ``extended`` adds pattern fusions into
bigger ONNX ops (Gelu, LayerNormalization, RMSNormalization) that a provider may or may not run natively (the
core expands an unclaimed one back into its function body). Passes run in this order.
"""

from __future__ import annotations

from typing import Any

from ..hookspecs import hookimpl


class BuiltinPasses:
    """Plugin object for the core's passes (named ``epoxy.builtin`` in the manager)."""

    @hookimpl
    def epoxy_register_passes(self, register: Any) -> None:
        # imported here: the registry (``epoxy providers`` too) is built without onnx_ir
        from .passes import (
            BatchNormAffineFoldPass,
            CastEliminationPass,
            ConstantFoldingPass,
            ConvAffineFoldPass,
            ConvBatchNormFoldPass,
            DeadNodeRemovalPass,
            DequantizeWeightsPass,
            DropoutEliminationPass,
            FlattenedGemmPass,
            GeluFusionPass,
            IdentityEliminationPass,
            LayerNormFusionPass,
            LegacyInitializerInputsPass,
            LiftConstantsPass,
            MatMulAddToGemmPass,
            MatMulAffineFoldPass,
            ReshapeTransposeSimplifyPass,
            RMSNormFusionPass,
            StaticShapePass,
        )
        from .passes.channel_shuffle import ChannelShufflePass
        from .passes.qdq_add import QDQAddPass
        from .passes.qdq_conv_integer import QDQConvToIntegerPass
        from .passes.qdq_lookup import QDQConcatRequantizePass, QDQLookupPass
        from .passes.qdq_matmul import QDQMatMulToIntegerPass
        from .passes.qdq_pairs import QuantizeDequantizePairPass
        from .passes.qdq_passthrough import QDQPassThroughPass
        from .passes.qdq_pool import QDQAveragePoolPass, QDQGlobalAveragePoolPass
        from .passes.qdq_qlinear import QDQConvToQLinearPass

        # Constant nodes become initializers so kernels see their values (NodeSpec.constants)
        register(LiftConstantsPass(lift_all_constants=False, size_limit=0), level="basic",
                 gradient_safe=True)
        register(LegacyInitializerInputsPass(), level="basic", gradient_safe=True)
        register(IdentityEliminationPass(), level="basic")
        register(CastEliminationPass(), level="basic")
        register(DropoutEliminationPass(), level="basic")
        # cpu first: QDQ convolutions and linear layers onto its integer codes (extended: int8
        # rounding, see the passes), then the other weights' DQs folded for its float kernels; a
        # provider running QDQ in int8 itself keeps them
        register(QDQPassThroughPass(), level="extended", providers=("cpu",))  # exact: codes moved as they are
        # exact: tables of the graph's own ops over the 256 codes, folded by the plan builder; before
        # QDQAddPass, so that an Add or Mul of a constant (per tensor or per channel) is a table
        register(QDQLookupPass(), level="extended", providers=("cpu",))
        register(QDQAddPass(), level="extended", providers=("cpu",))  # exact: the float reading in one pass
        register(QDQConcatRequantizePass(), level="extended", providers=("cpu",))
        # within one code: the exact mean's rounding (the graph rounds float32 sums first)
        register(QDQGlobalAveragePoolPass(), level="extended", providers=("cpu",))
        register(QDQAveragePoolPass(), level="extended", providers=("cpu",))
        register(QDQConvToQLinearPass(), level="extended", providers=("cpu",))
        register(QDQConvToIntegerPass(), level="extended", providers=("cpu",))  # the ones read as float
        register(QDQMatMulToIntegerPass(), level="extended", providers=("cpu",))
        register(DequantizeWeightsPass(), level="basic", providers=("cpu",))
        # static dimensions read through Shape become constants the folding after it carries on
        register(StaticShapePass(), level="basic")
        register(ConstantFoldingPass(), level="basic")
        # activations' Q->DQ into a cpu op: extended, so basic-level files stay standard ONNX
        register(QuantizeDequantizePairPass(), level="extended", providers=("cpu",))
        register(ConvBatchNormFoldPass(), level="basic")
        register(BatchNormAffineFoldPass(), level="basic")
        register(ConvAffineFoldPass(), level="basic")
        # before MatMul+Add -> Gemm: a linear layer's per-channel scale (convnext's layer scale,
        # after its Transpose) into the weights
        register(MatMulAffineFoldPass(), level="extended")
        # before MatMul+Add -> Gemm (which takes 2-D products only): a linear layer's flatten,
        # Gemm and reshape back become a MatMul (+ Add) the providers' fusions see through
        register(FlattenedGemmPass(), level="extended")
        register(MatMulAddToGemmPass(), level="extended")
        register(ReshapeTransposeSimplifyPass(), level="basic")
        # after the QDQ passes: the shuffle then moves int8 codes, which the cpu op keeps channels last
        register(ChannelShufflePass(), level="extended", providers=("cpu",))
        register(GeluFusionPass(), level="extended")
        register(LayerNormFusionPass(), level="extended")
        # an opset-23 op: only where cpu runs first (other providers may not claim it)
        register(RMSNormFusionPass(), level="extended", providers=("cpu",))
        register(DeadNodeRemovalPass(), level="basic")
