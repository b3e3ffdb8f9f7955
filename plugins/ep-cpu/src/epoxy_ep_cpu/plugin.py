"""Entry point module (``epoxy.providers: cpu``): cheap to import, kernels load on create."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import CpuProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(CpuProviderFactory())


@hookimpl
def epoxy_register_passes(register: Any) -> None:
    # fusions into com.epoxy.cpu ops (kernels in ops/fused.py): only sessions using cpu
    from .ops.fused import cpu_passes
    from .ops.fused_attention_core import attention_passes
    from .ops.fused_batchnorm import CpuBatchNormActivationPass
    from .ops.fused_int8 import CpuConvIntegerToFloatPass, CpuMatMulIntegerToFloatPass
    from .ops.rotary import CpuRotaryFusionPass
    from .ops.squeeze_excite import CpuSqueezeExcitePass

    # exact up to float rounding (tests/ep_cpu/test_attention_fusion.py): on by default
    for pass_ in attention_passes():
        register(pass_, level="basic", providers=("cpu",))
    # the same values bit for bit (tests/ep_cpu/test_rotary_fusion.py): on by default
    register(CpuRotaryFusionPass(), level="basic", providers=("cpu",))
    for pass_ in cpu_passes():
        register(pass_, level="extended", providers=("cpu",))
    # after cpu_passes: a block's 1x1 convolutions carry their activations by then
    register(CpuSqueezeExcitePass(), level="extended", providers=("cpu",))
    # after cpu_passes: a BatchNorm after a Conv is folded into it there first
    register(CpuBatchNormActivationPass(), level="extended", providers=("cpu",))
    # a dynamic int8 MatMul's Cast -> Mul [-> Add] tail: the chain's values bit for bit
    register(CpuMatMulIntegerToFloatPass(), level="extended", providers=("cpu",))
    register(CpuConvIntegerToFloatPass(), level="extended", providers=("cpu",))
