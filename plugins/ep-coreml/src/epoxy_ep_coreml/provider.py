"""The Core ML provider: capability over the op table, one ML Program per fused group."""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from epoxy.contract import Capability, CompiledArtifact, Device, GraphSpec, KernelFn, NodeSpec, SubgraphSpec
from epoxy.errors import InvalidFeedError, ProviderError
from epoxy.kit import HostAllocator

from .facts import Facts
from .grouping import plan_groups
from .options import CoreMLOptions
from .program import CompiledPackage, compile_group

NAME = "coreml"


class CoreMLProvider:
    """Claims fused groups only (no single-node kernels).

    ``convert_only``: compile converts and saves packages but returns a callable that refuses
    to run (what ``compile_model`` uses off macOS).
    """

    def __init__(self, device: Device, options: CoreMLOptions, *, convert_only: bool = False) -> None:
        self.name = NAME
        self.device = device
        self.options = options
        self.allocator = HostAllocator(device)
        self.convert_only = convert_only
        self.compiled: list[tuple[str, CompiledPackage]] = []  # (group label, package), in compile order
        self._facts: tuple[Any, Facts] | None = None
        #: kernel -> its converted package, for ``export_compiled``
        self.exports: weakref.WeakKeyDictionary[Any, CompiledPackage] = weakref.WeakKeyDictionary()

    def _facts_for(self, graph: GraphSpec) -> Facts:
        if self._facts is None or self._facts[0] is not graph:
            self._facts = (graph, Facts(graph))
        return self._facts[1]

    def capability(self, graph: GraphSpec) -> Capability:
        return plan_groups(graph, self._facts_for(graph)).capability()

    def kernel(self, node: NodeSpec) -> KernelFn:
        raise ProviderError(f"coreml runs fused groups only; node {node.name!r} was never claimed singly",
                            provider=NAME)

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        facts = self._facts_for(subgraph.graph)
        package = compile_group(subgraph, facts, self.options)
        self.compiled.append((subgraph.group.label, package))
        if self.convert_only or not can_predict():
            kernel = _refuse(subgraph.group.label, package)
        else:
            kernel = make_runner(subgraph, facts, package, self.options)
        self.exports[kernel] = package
        return kernel

    # -- compiled models (SDK API 1.2, :mod:`.aot`) ------------------------------------------
    def export_compiled(self, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
        """The group's ``.mlpackage`` (and ``.mlmodelc`` on macOS) as one checked blob."""
        from .aot import export_group

        return export_group(self, kernel, subgraph)

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
        """The group's kernel from an exported package, without converting again."""
        from .aot import import_group

        return import_group(self, subgraph, artifact)


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


def packages(provider: CoreMLProvider) -> Sequence[CompiledPackage]:
    return [p for _label, p in provider.compiled]
