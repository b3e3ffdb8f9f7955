"""Ops onnxruntime's CPU graph optimizer writes into a saved model (``optimized_model_filepath``
at ``ORT_ENABLE_EXTENDED``) that have no ai.onnx equivalent of the same name and opset:

- com.microsoft ``FusedConv(X, W, B?, Z?)``: Conv attributes plus ``activation`` (Relu, Tanh,
  Sigmoid, LeakyRelu, Clip, HardSigmoid; absent or "": none) and ``activation_params`` (LeakyRelu alpha; Clip
  min, max; HardSigmoid alpha, beta); ``Y = act(Conv(X, W, B) + Z)``. It is this
  provider's own ``com.epoxy.cpu`` FusedConv (``fused.py``) under onnxruntime's name.
- com.microsoft ``FusedGemm(A, B, C?)``: Gemm attributes plus ``activation`` and its
  ``activation_alpha`` / ``activation_beta`` / ``activation_gamma`` (required where the
  activation has that parameter, as in onnxruntime); ``Y = act(Gemm(A, B, C))``.
- ai.onnx ``LayerNormalization`` below opset 17: onnxruntime's own schema (since 1), which
  its LayerNormFusion writes whatever the model's opset; same attributes and outputs as
  LayerNormalization-17, so that kernel runs it.

The activations are the registered ai.onnx kernels, so they round like the standalone ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._contrib_util import bad_attribute, delegate, standalone
from ._util import as_text
from .fused import DOMAIN as EPOXY_FUSED
from .fused import DOMAIN_VERSION as EPOXY_FUSED_VERSION

MS = "com.microsoft"

#: FusedConv activation -> number of ``activation_params`` it takes (MLAS's fused activations)
_CONV_ACTIVATIONS = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}


def _activation_name(node: NodeSpec, allowed: Sequence[str], default: str | None = None) -> str:
    name = node.attr("activation")
    text = default if name is None else as_text(name)
    if text not in allowed:
        raise bad_attribute(node, "activation", text, f"one of {', '.join(repr(a) for a in allowed)}")
    return text


@KERNELS.register("FusedConv", 1, domain=MS)
def fused_conv(node: NodeSpec):
    name = _activation_name(node, tuple(_CONV_ACTIVATIONS), default="")  # none: plain Conv (+ Z)
    params = tuple(float(p) for p in (node.attr("activation_params") or ()))
    if len(params) != _CONV_ACTIVATIONS[name]:
        raise bad_attribute(node, "activation_params", params,
                            f"{_CONV_ACTIVATIONS[name]} value(s) for activation {name}")
    if name == "Clip" and params[0] > params[1]:
        raise bad_attribute(node, "activation_params", params, "Clip min <= max")
    attrs = dict(node.attributes, activation=name, activation_params=params)
    return delegate(node, "FusedConv", EPOXY_FUSED_VERSION, domain=EPOXY_FUSED, attributes=attrs)


#: FusedGemm activation -> (ai.onnx op, opset, {op attribute: FusedGemm attribute})
_GEMM_ACTIVATIONS: dict[str, tuple[str, int, dict[str, str]]] = {
    "Relu": ("Relu", 14, {}),
    "Tanh": ("Tanh", 13, {}),
    "Sigmoid": ("Sigmoid", 13, {}),
    "LeakyRelu": ("LeakyRelu", 16, {"alpha": "activation_alpha"}),
    "HardSigmoid": ("HardSigmoid", 22, {"alpha": "activation_alpha", "beta": "activation_beta"}),
    "Elu": ("Elu", 22, {"alpha": "activation_alpha"}),
    "Selu": ("Selu", 22, {"alpha": "activation_alpha", "gamma": "activation_gamma"}),
    "ThresholdedRelu": ("ThresholdedRelu", 22, {"alpha": "activation_alpha"}),
    "Softplus": ("Softplus", 22, {}),
    "Softsign": ("Softsign", 22, {}),
}


def _gemm_activation(node: NodeSpec) -> Callable[[np.ndarray], np.ndarray]:
    name = _activation_name(node, tuple(_GEMM_ACTIVATIONS))
    op, opset, names = _GEMM_ACTIVATIONS[name]
    attrs: dict[str, Any] = {}
    for mine, theirs in names.items():  # required, as onnxruntime's activation functors read them
        value = node.attr(theirs)
        if not isinstance(value, (float, int)):
            raise bad_attribute(node, theirs, value, f"a float (the {mine} of activation {name})")
        attrs[mine] = float(value)
    return standalone(node, op, opset, attrs)


@KERNELS.register("FusedGemm", 1, domain=MS)
def fused_gemm(node: NodeSpec):
    act = _gemm_activation(node)
    gemm_attrs = {k: node.attributes[k] for k in ("alpha", "beta", "transA", "transB") if k in node.attributes}
    gemm = delegate(node, "Gemm", 13, n_inputs=3, attributes=gemm_attrs)

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        return act(gemm(a, b) if c is None else gemm(a, b, c))

    return run


@KERNELS.register("LayerNormalization", 1)
def layer_normalization(node: NodeSpec):
    return delegate(node, "LayerNormalization", 17)
