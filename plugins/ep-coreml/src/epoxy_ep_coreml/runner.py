"""The kernel of a converted group: Core ML predictions on macOS, a refusal elsewhere.

Shared by the provider (fresh conversions) and :mod:`.aot` (imported packages), so neither
imports the other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from epoxy.contract import KernelFn, SubgraphSpec
from epoxy.errors import InvalidFeedError, ProviderError

from .facts import Facts
from .options import CoreMLOptions
from .program import CompiledPackage

NAME = "coreml"


def can_predict() -> bool:
    """Core ML predictions exist on macOS only (coremltools raises elsewhere)."""
    return sys.platform == "darwin"


def _refuse(label: str, package: CompiledPackage) -> KernelFn:
    def run(*_args: Any) -> tuple[Any, ...]:
        raise ProviderError(f"Core ML group {label!r} was converted to {package.path} but Core ML runs on macOS only",
                            provider=NAME)
    return run


def make_runner(subgraph: SubgraphSpec, facts: Facts, package: CompiledPackage, options: CoreMLOptions,
                model: Any = None) -> KernelFn:
    """A callable predicting through coremltools (macOS): inputs in SubgraphSpec order,
    returns a tuple in SubgraphSpec.outputs order. ``model``: already loaded (an imported
    ``.mlmodelc``), else the package is loaded."""
    if model is None and package.path is not None:
        model = _loader(package.path, options.compute_units)
    position = {name: i for i, name in enumerate(subgraph.inputs)}
    feeds = [(position[f.onnx_name], f.coreml_name, np.int32 if f.dtype in ("int64", "int32", "bool") else np.float32)
             for f in package.inputs]
    baked = [
        (position[name], name, facts.value(name)) for name in package.baked if subgraph.graph.constant(name) is not None
    ]
    fetch: list[Callable[[dict[str, Any]], Any]] = []
    for f in package.outputs:
        fetch.append(_fetcher(f, facts))
    label = subgraph.group.label

    def run(*args: Any) -> tuple[Any, ...]:
        for pos, name, value in baked:
            given = args[pos]
            if given is not value and not np.array_equal(np.asarray(given), value):
                raise InvalidFeedError(
                    f"initializer {name!r} is compiled into Core ML group {label!r}; overriding it at run time "
                    "is not supported by the coreml provider (run that model with providers=['cpu'])",
                    input_name=name)
        result = {} if model is None else model.predict({cname: np.ascontiguousarray(args[pos], dtype=dt)
                                                         for pos, cname, dt in feeds})
        return tuple(f(result) for f in fetch)

    run.mlmodel = model  # type: ignore[attr-defined]  # its compiled form is exported on macOS
    return run


def _fetcher(f: Any, facts: Facts) -> Callable[[dict[str, Any]], Any]:
    if f.coreml_name is None:
        value = facts.value(f.onnx_name)
        return lambda _result: value
    dtype = np.dtype(f.dtype)
    shape = tuple(f.shape)
    name = f.coreml_name

    def fetch(result: dict[str, Any]) -> Any:
        return np.asarray(result[name]).astype(dtype, copy=False).reshape(shape)
    return fetch


def _load_model(path: Any, compute_units: str) -> Any:
    """``coremltools.models.MLModel`` for a saved package on the chosen compute units."""
    from . import _ct

    ct = _ct.coremltools()
    with _ct.quiet():
        return ct.models.MLModel(str(path), compute_units=getattr(ct.ComputeUnit, compute_units))


#: how packages are loaded for prediction (tests substitute a simulated runtime)
_loader: Callable[[Any, str], Any] = _load_model
