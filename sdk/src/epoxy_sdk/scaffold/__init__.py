"""``epoxy sdk new-provider``: generate a provider package laid out like the in-house ones.

    from epoxy_sdk.scaffold import new_provider
    new_provider("my_npu", "kernels", "ep-my-npu")      # or style "compiler"

The generated code imports only the public contract (``epoxy.contract``, ``epoxy.hookspecs``,
``epoxy.kit``, ``epoxy.errors``, ``epoxy.testing``) and passes the conformance kit's API
scope as written. The ``epoxy`` CLI imports this module lazily, so the core never needs
the SDK.
"""

from .names import TAKEN_NAMES, Names, ScaffoldError, names_for, validate_name
from .render import STYLES, default_folder, new_provider, render

__all__ = ["STYLES", "TAKEN_NAMES", "Names", "ScaffoldError", "default_folder", "names_for", "new_provider", "render",
           "validate_name"]
