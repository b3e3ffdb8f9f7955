"""The com.microsoft transformer ops onnxruntime's ``quantize_dynamic`` writes for a graph
its transformer optimizer fused: QAttention and QEmbedLayerNormalization.

QAttention is Attention whose packed QKV projection is an integer GEMM. Inputs: ``input``
(uint8/int8), ``weight`` (uint8/int8, [D, 3 * hidden]), ``bias``
(float, [3 * hidden]), ``input_scale`` (scalar), ``weight_scale`` (scalar or per column),
``mask_index``?, ``input_zero_point``?, ``weight_zero_point``? (scalar or per column),
``past``?. The projection is ``float32(acc) * (input_scale * weight_scale) + bias``, as
onnxruntime's GEMM output stage computes it (the integer sums are exact); the rest is the
float Attention of ``contrib_attention`` (masks, past/present, causal, ``scale``).

QEmbedLayerNormalization is EmbedLayerNormalization over 8-bit embedding tables, gamma and
beta (each with its scale and zero point, inputs 8-17), dequantized in float32
(``(q - zp) * scale``) and then run through the float kernel (no position_ids input).
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._contrib_util import delegate
from .contrib_attention import MS, PackedAttention
from .contrib_quantized import int_matmul, per_column


@KERNELS.register("QAttention", 1, domain=MS)
def qattention(node: NodeSpec):
    cfg = PackedAttention.of(node)

    def run(input, weight, bias, input_scale, weight_scale, mask_index=None,
            input_zero_point=None, weight_zero_point=None, past=None):
        dt = np.asarray(bias).dtype
        acc = int_matmul(input, weight, input_zero_point, weight_zero_point)
        scale = per_column(weight_scale).astype(np.float32) * np.asarray(input_scale, np.float32).reshape(())
        proj = acc.astype(np.float32) * scale + bias.astype(np.float32)
        return cfg.run(node, proj.astype(np.float32), dt, mask_index, past, None)

    return run


def _dequantize(q: np.ndarray | None, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray | None:
    if q is None:
        return None
    zp = 0 if zero_point is None else np.asarray(zero_point).astype(np.int32).reshape(())
    return (q.astype(np.int32) - zp).astype(np.float32) * np.asarray(scale, np.float32).reshape(())


@KERNELS.register("QEmbedLayerNormalization", 1, domain=MS)
def qembed_layer_normalization(node: NodeSpec):
    embed = delegate(node, "EmbedLayerNormalization", 1, domain=MS, n_inputs=8,
                     attributes={"epsilon": node.attr("epsilon", 1e-12)})

    def run(input_ids, segment_ids, word_q, position_q, segment_q, gamma_q, beta_q, mask,
            word_scale, position_scale, segment_scale, gamma_scale, beta_scale,
            word_zp, position_zp, segment_zp, gamma_zp, beta_zp):
        return embed(input_ids, segment_ids, _dequantize(word_q, word_scale, word_zp),
                     _dequantize(position_q, position_scale, position_zp),
                     _dequantize(segment_q, segment_scale, segment_zp),
                     _dequantize(gamma_q, gamma_scale, gamma_zp), _dequantize(beta_q, beta_scale, beta_zp), mask)

    return run
