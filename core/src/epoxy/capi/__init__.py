"""onnxruntime's exception names, for code that catches them after ``import epoxy as ort``.

``from epoxy.capi import Fail, InvalidArgument`` (or the longer
``epoxy.capi.onnxruntime_pybind11_state`` path onnxruntime code uses) gives classes that
epoxy's own errors inherit: an :class:`~epoxy.errors.InvalidFeedError` is an
``InvalidArgument``, a :class:`~epoxy.errors.KernelError` a ``RuntimeException``, and so on
(docs/ORT_COMPAT.md has the table). Every one is an :class:`~epoxy.errors.EpoxyError`.
"""

from __future__ import annotations

from ..errors import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    RuntimeException,
)
from ..errors import OrtNotImplemented as NotImplemented  # noqa: A004 - onnxruntime's name

__all__ = [
    "DeviceReset",
    "EPFail",
    "EngineError",
    "Fail",
    "InvalidArgument",
    "InvalidGraph",
    "InvalidProtobuf",
    "ModelLoadCanceled",
    "ModelLoaded",
    "ModelRequiresCompilation",
    "NoModel",
    "NoSuchFile",
    "NotFound",
    "NotImplemented",
    "RuntimeException",
]
