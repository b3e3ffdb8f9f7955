"""epoxy-serve: epoxy models behind Ray Serve / Ray Data and NVIDIA Triton (PyTriton), speaking the
Open Inference Protocol v2 (KServe v2), so Triton and OVMS clients work unchanged."""

from .config import ServeConfig
from .errors import BadRequest, ModelNotFound, ModelNotReady, PayloadTooLarge, ServeError
from .model import ServedModel, TensorSpec
from .repository import ModelSource, discover
from .version import __version__

#: names that need the ray extra, imported on first use so ``import epoxy_serve`` stays light
_LAZY = {"deployment": "ray_app", "predict_batches": "ray_data", "EpoxyPredictor": "ray_data"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BadRequest", "EpoxyPredictor", "ModelNotFound", "ModelNotReady", "ModelSource", "PayloadTooLarge",
           "ServeConfig", "ServeError", "ServedModel", "TensorSpec", "__version__", "deployment", "discover",
           "predict_batches"]
