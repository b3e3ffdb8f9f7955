"""The core's own passes, registered through the same hook as plugins' passes."""

from __future__ import annotations

from typing import Any

from onnx_ir.passes.common import IdentityEliminationPass, LiftConstantsToInitializersPass, RemoveUnusedNodesPass

from ..hookspecs import hookimpl


class BuiltinPasses:
    """Plugin object for the core's passes (named ``epoxy.builtin`` in the manager)."""

    @hookimpl
    def epoxy_register_passes(self, register: Any) -> None:
        # Constant nodes become initializers so kernels see their values (NodeSpec.constants)
        register(LiftConstantsToInitializersPass(lift_all_constants=False, size_limit=0), level="basic")
        register(IdentityEliminationPass(), level="basic")
        register(RemoveUnusedNodesPass(), level="basic")
