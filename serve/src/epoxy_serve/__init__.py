"""epoxy-serve: epoxy models behind Ray Serve / Ray Data and NVIDIA Triton (PyTriton), speaking the
Open Inference Protocol v2 (KServe v2), so Triton and OVMS clients work unchanged."""

from .config import ServeConfig
from .errors import BadRequest, ModelNotFound, ModelNotReady, PayloadTooLarge, ServeError
from .model import ServedModel, TensorSpec
from .repository import ModelSource, discover
from .version import __version__

__all__ = ["BadRequest", "ModelNotFound", "ModelNotReady", "ModelSource", "PayloadTooLarge", "ServeConfig",
           "ServeError", "ServedModel", "TensorSpec", "__version__", "discover"]
