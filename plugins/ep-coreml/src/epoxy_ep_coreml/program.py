"""One fused group -> one MIL program -> one ``.mlpackage`` in the cache.

The cache key hashes everything that changes the package: the group's nodes (op, opset,
attributes, value names), the types of its boundary values, every constant it folds in,
the conversion options, and the versions of this package and coremltools. A package is
written to a temporary folder and renamed into place, so concurrent sessions never see a
half-written one. Next to ``<key>.mlpackage`` a ``<key>.json`` manifest maps ONNX boundary
names to Core ML feature names (``input_0``..., ``output_0``...).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from epoxy.contract import GraphSpec, SubgraphSpec
from epoxy.kit import group_fingerprint

from . import _ct
from .facts import Facts
from .ops import OPS, BuildContext
from .options import CoreMLOptions
from .version import __version__

#: ONNX dtype -> the dtype of the Core ML feature carrying it
_FEATURE_DTYPE = {"float32": "fp32", "int32": "int32", "int64": "int32", "bool": "int32"}


@dataclass
class Feature:
    onnx_name: str
    coreml_name: str | None  # None: a constant output (the wrapper returns it, no feature)
    dtype: str  # ONNX-side numpy dtype name
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"onnx": self.onnx_name, "coreml": self.coreml_name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass
class CompiledPackage:
    """A converted group: where its package is and how its features map to ONNX values."""

    key: str
    path: Path | None  # None when the group has no run-time output (all constants)
    inputs: list[Feature]  # run-time inputs, in feature order
    outputs: list[Feature]  # every group output, in SubgraphSpec.outputs order
    baked: list[str] = field(default_factory=list)  # boundary inputs folded in as constants
    cached: bool = False

    def manifest(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "package": None if self.path is None else self.path.name,
            "inputs": [f.to_json() for f in self.inputs],
            "outputs": [f.to_json() for f in self.outputs],
            "baked_inputs": self.baked,
            "epoxy_ep_coreml": __version__,
        }


def _coremltools_version() -> str:
    try:
        return metadata.version("coremltools")
    except metadata.PackageNotFoundError:
        return "missing"


def group_key(subgraph: SubgraphSpec, facts: Facts, options: CoreMLOptions) -> str:
    """The package cache key: the group's fingerprint (``epoxy.kit.group_fingerprint``, the
    values ``facts`` knows counted as constants), salted with the versions and options that
    shape the conversion."""
    salt = (f"epoxy-ep-coreml {__version__} coremltools {_coremltools_version()} "
            + json.dumps(options.conversion_key(), sort_keys=True))
    known = lambda name: facts.value(name) if facts.is_known(name) else None  # noqa: E731
    return group_fingerprint(subgraph, known=known, salt=salt)[:32]


def _dtype_name(facts: Facts, name: str) -> str:
    dt = facts.dtype(name)
    return "unknown" if dt is None else np.dtype(dt).name


def plan_features(subgraph: SubgraphSpec, facts: Facts) -> tuple[list[Feature], list[Feature], list[str]]:
    """Run-time inputs, outputs and baked (known) boundary inputs of a group."""
    inputs, baked = [], []
    for name in subgraph.inputs:
        if facts.is_known(name):
            baked.append(name)
            continue
        shape = facts.shape(name)
        if shape is None:
            raise ValueError(f"input {name!r} of the group has no static shape")
        inputs.append(Feature(name, f"input_{len(inputs)}", _dtype_name(facts, name), shape))
    outputs = []
    count = 0
    for name in subgraph.outputs:
        shape = facts.shape(name) or ()
        if facts.is_known(name):
            outputs.append(Feature(name, None, _dtype_name(facts, name), shape))
        else:
            outputs.append(Feature(name, f"output_{count}", _dtype_name(facts, name), shape))
            count += 1
    return inputs, outputs, baked


def build_program(subgraph: SubgraphSpec, facts: Facts, options: CoreMLOptions,
                  inputs: Sequence[Feature], outputs: Sequence[Feature]) -> Any:
    """The MIL program for a group (coremltools imported here)."""
    ct = _ct.coremltools()
    mil = _ct.mil()
    mb, types = mil.Builder, mil.types
    graph: GraphSpec = subgraph.graph
    target = getattr(ct.target, options.minimum_deployment_target)
    mil_types = {"fp32": types.fp32, "int32": types.int32}
    specs = {f.coreml_name: mb.placeholder(shape=f.shape, dtype=mil_types[_FEATURE_DTYPE[f.dtype]])
             for f in inputs}
    with _ct.quiet(), mil.Function(specs, opset_version=target) as func:
        ctx = BuildContext(mb, types, facts, options.opset)
        for f in inputs:
            var = func.inputs[f.coreml_name]
            if f.dtype == "bool":
                var = mb.cast(x=var, dtype="bool")
            ctx.set(f.onnx_name, var)
        for i in sorted(subgraph.group.nodes):
            if i in facts.folded:
                continue
            node = graph.nodes[i]
            try:
                OPS[node.op_type].build(node, ctx)
            except Exception as exc:
                raise RuntimeError(f"translating node {node.name!r} ({node.qualified_op}) to MIL failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
        results = []
        for f in outputs:
            if f.coreml_name is None:
                continue
            var = ctx.vars[f.onnx_name]
            if f.dtype == "bool":
                var = mb.cast(x=var, dtype="int32")
            results.append(mb.identity(x=var, name=f.coreml_name))
        func.set_outputs(results)
    program = mil.Program()
    program.add_function("main", func)
    return program


def convert(program: Any, options: CoreMLOptions, destination: Path) -> None:
    """``ct.convert(program, convert_to="mlprogram")`` and save to ``destination``."""
    ct = _ct.coremltools()
    precision = ct.precision.FLOAT16 if options.compute_precision == "fp16" else ct.precision.FLOAT32
    with _ct.quiet() as chatter:
        try:
            model = ct.convert(
                program,
                convert_to="mlprogram",
                compute_precision=precision,
                minimum_deployment_target=getattr(ct.target, options.minimum_deployment_target),
                skip_model_load=True,
            )
        except Exception as exc:
            detail = chatter.getvalue().strip().splitlines()[-3:]
            raise RuntimeError(f"coremltools conversion failed: {type(exc).__name__}: {exc}"
                               + (f" ({' / '.join(detail)})" if detail else "")) from exc
        model.short_description = "converted by epoxy-ep-coreml"
        model.save(str(destination))


def compile_group(subgraph: SubgraphSpec, facts: Facts, options: CoreMLOptions) -> CompiledPackage:
    """Convert a group (or reuse the cached package) and write its manifest."""
    key = group_key(subgraph, facts, options)
    inputs, outputs, baked = plan_features(subgraph, facts)
    cache = options.resolved_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    result = CompiledPackage(key, None, inputs, outputs, baked)
    if all(f.coreml_name is None for f in outputs):
        return result
    final = cache / f"{key}.mlpackage"
    manifest_path = cache / f"{key}.json"
    result.path = final
    if final.exists() and manifest_path.exists():
        result.cached = True
        return result
    program = build_program(subgraph, facts, options, inputs, outputs)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
    try:
        convert(program, options, tmp / "model.mlpackage")
        try:
            os.replace(tmp / "model.mlpackage", final)
        except OSError:
            if not final.exists():
                raise  # another process won the race otherwise; its package is identical
        _write_json(manifest_path, result.manifest())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
