"""The two torch.onnx exporters, each writing one ``Spec`` to a file.

TorchScript (``dynamo=False``) at opset 17, the opset onnxruntime's transformer optimizer
and quantizers are written against; dynamo (``dynamo=True``, torch.export + onnxscript) at
its default opset. Both get the same dynamic axes: every axis a ``Spec`` names is dynamic
(``Dim.DYNAMIC`` for dynamo, so an exporter that specialises one shows when the model is run
at another size).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import torch
from specs import Spec

TORCHSCRIPT_OPSET = 17


def torchscript(spec: Spec, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(spec.make(), spec.example(), str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), dynamic_axes={k: dict(v) for k, v in spec.dynamic.items()},
                          opset_version=TORCHSCRIPT_OPSET, dynamo=False)


def dynamo(spec: Spec, path: Path) -> None:
    shapes = {name: {axis: torch.export.Dim.DYNAMIC for axis in spec.dynamic.get(name, {})} for name in spec.inputs}
    # the exporter prints its progress on stdout: kept out of the test log
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(spec.make(), spec.example(), str(path), input_names=list(spec.inputs),
                          output_names=list(spec.outputs), dynamic_shapes=shapes, dynamo=True,
                          external_data=False, verbose=False)
