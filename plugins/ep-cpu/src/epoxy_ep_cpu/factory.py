"""The cpu provider factory: one host device, kernels from this package's registry."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device
from epoxy.kit import KernelProvider, OpSupport

from .version import __version__


class CpuProviderFactory:
    """Identity and discovery for the numpy provider; always available."""

    name = "cpu"
    vendor = "epoxy"
    version = __version__
    sdk_api = "1.1"  # the epoxy SDK API written against (a literal: the core checks it; 1.1: OptionTable)
    priority = 0  # lowest: the fallback runs what nobody else claims
    #: onnxruntime's name for this provider: sessions and ``in get_available_providers()`` accept it
    aliases = ("CPUExecutionProvider",)

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, "cpu", 0, platform.processor() or platform.machine(),
                       properties={"cores": os.cpu_count() or 1})]

    def create(self, device: Device, options: Mapping[str, Any]) -> KernelProvider:
        from .provider import CpuProvider
        from .registry import load_kernels
        from .settings import TABLE

        settings = TABLE.parse(options)  # before loading kernels: a bad option fails fast
        if settings.heap_arrays:
            from .malloc_policy import apply

            apply()
        return CpuProvider(self.name, device, load_kernels(), options, settings)

    def options(self) -> Mapping[str, str]:
        """What ``create`` accepts, from the table it validates against (``epoxy providers``);
        the ``jit`` line also says whether the jit tier can run here, and why not, and whether
        its int8 GEMM can (AVX512-VNNI); the ``heap_arrays`` line says what this process did."""
        from .jit import availability
        from .settings import TABLE

        described = TABLE.describe()
        here = availability().describe()
        if availability().available:
            from .jit import kernels_int8_gemm, kernels_sgemm, llvm_module

            reason = kernels_int8_gemm.support()
            here += ("; int8 GEMM on AVX512-VNNI" if reason is None
                     else f"; no int8 GEMM ({reason}): integer products run on float32 BLAS")
            reason = kernels_sgemm.support()
            if reason is not None:
                here += (f"; no float32 few-rows GEMM ({reason}): every float product and convolution GEMM "
                         "runs on BLAS")
            elif llvm_module.avx512():
                here += ("; float32 GEMM of 2-32 rows, the row-gathered, pointwise, implicit-GEMM and small-layer "
                         "convolutions on AVX-512")
            else:
                here += ("; float32 GEMM of 2-32 rows, the row-gathered, pointwise and small-layer convolutions on "
                         "AVX2 (the implicit-GEMM ones need AVX-512)")
        described["jit"] = f"{described['jit']} [here: {here}]"
        from .malloc_policy import status

        described["heap_arrays"] = f"{described['heap_arrays']} [this process: {status()}]"
        return described

    def supported_ops(self) -> list[OpSupport]:
        from .registry import load_kernels

        return load_kernels().ops()
