"""Conv/ConvTranspose followed by per-channel constant Add/Sub/Mul/Div -> one Conv.

``Add(Conv(x, W), b)`` (a bias added by a separate node, as exporters often write it),
``Mul(Conv(x, W), s)`` (a scale) and chains of those fold into the conv's W and B when the
constant varies along the channel axis only (shape ``(M,1,1)``, ``(1,M,1,1)``, scalar...).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, constant, graph_nodes, is_op
from .affine_chain import follow_affine
from .conv_bn import bn_inference_affine, fold_into_conv


class ConvAffineFoldPass(RewritePass):
    """Fold per-channel constant Add/Sub/Mul/Div chains after a Conv into its W and B."""

    needs = (frozenset({"Conv", "ConvTranspose"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in graph_nodes(graph):
            if conv.graph is not graph or not is_op(conv, ("Conv", "ConvTranspose")) or len(conv.inputs) < 2:
                continue
            w = constant(conv.inputs[1])
            if w is None or w.dtype.kind != "f":
                continue
            group = int(conv.attributes.get_int("group", 1))
            m = w.shape[1] * group if conv.op_type == "ConvTranspose" else w.shape[0]
            nodes, scale, shift, last = follow_affine(conv.outputs[0], w.ndim, m, w.dtype)
            if not nodes:
                continue
            if fold_into_conv(graph, namer, conv, scale, shift, [conv, *nodes], last):
                count += 1
        return count


class BatchNormAffineFoldPass(RewritePass):
    """``BatchNormalization`` followed by per-channel constant Add/Sub/Mul/Div -> one BN."""

    needs = (frozenset({"BatchNormalization"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        from ...kit.passes import add_initializer, rank_of, take_place, written_into

        count = 0
        for bn in graph_nodes(graph):
            if bn.graph is not graph or not is_op(bn, "BatchNormalization"):
                continue
            x = bn.inputs[0] if bn.inputs else None
            rank = rank_of(bn.outputs[0]) or rank_of(x)
            gamma = constant(bn.inputs[1]) if len(bn.inputs) > 1 else None
            if rank is None or rank < 2 or gamma is None:
                continue
            # the chain first: most BNs have none, and reading the BN's affine map is the dearer test
            nodes, scale, shift, last = follow_affine(bn.outputs[0], rank, gamma.size, gamma.dtype)
            affine = bn_inference_affine(model, bn, None) if nodes else None
            if affine is None:
                continue
            s0, t0 = affine
            s = s0 if scale is None else s0 * scale
            t = (t0 if scale is None else t0 * scale) + (0 if shift is None else shift)
            # the new BN has mean 0 and var 1 (eps kept), so its scale absorbs sqrt(1 + eps)
            eps = float(bn.attributes.get_float("epsilon", 1e-5))
            base = bn.name or "bn"
            dtype = gamma.dtype
            folded = {"scale": (s * np.sqrt(1.0 + eps)).astype(dtype), "bias": t.astype(dtype),
                      "mean": np.zeros(gamma.size, dtype), "var": np.ones(gamma.size, dtype)}
            # the BN itself reads the folded parameters (a new node and the graph splice were most
            # of the fold's time), written into its own when they are a pass's (folded fills);
            # its output takes the chain's place
            for index, (role, data) in enumerate(folded.items(), start=1):
                param = bn.inputs[index]
                if written_into(param, constant(param), data) is None:
                    bn.replace_input_with(index, add_initializer(graph, namer, f"{base}.{role}_folded", data,
                                                                 fresh=True))
            take_place(graph, bn.outputs[0], last, nodes)
            count += 1
        return count
