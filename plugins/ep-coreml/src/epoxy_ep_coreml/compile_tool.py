"""Convert a model's Core ML-capable parts to ``.mlpackage`` files on any OS.

``compile_model`` runs epoxy's own pipeline (load, optimize, partition) with a converting
coreml provider and a placeholder for everything else, so the groups are exactly the ones a
macOS session would compile (same cache keys: point a Mac's ``cache_dir`` at the output to
reuse them). The ``epoxy-coreml-compile`` console script: with ``-o OUT.onnx`` it is
``epoxy compile MODEL -o OUT.onnx --providers coreml`` (a compiled model, packages inside);
with ``-o FOLDER`` it keeps writing the packages and ``summary.json`` into the folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epoxy.contract import Capability, Device, GraphSpec, NodeSpec, SubgraphSpec
from epoxy.errors import EpoxyError, InvalidArgumentError
from epoxy.kit import HostAllocator

from .factory import CONVERTER
from .options import TABLE, CoreMLOptions
from .program import CompiledPackage
from .provider import CoreMLProvider
from .version import __version__


@dataclass
class CompileResult:
    """``packages``: saved ``.mlpackage`` paths, one per fused group. ``groups``: per group,
    its label, node names and feature mapping. ``report``: the partition report (which node
    went where, and why coreml declined the others). ``summary``: node counts."""

    packages: list[Path]
    groups: list[dict[str, Any]]
    report: Any
    summary: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Any:  # ``packages, summary = compile_model(...)`` also works
        return iter((self.packages, self.summary))


class _ConvertFactory:
    name = "coreml"
    vendor = "Apple Core ML (conversion only)"
    version = __version__
    sdk_api = "1.0"  # the epoxy SDK API written against (a literal: the core checks it)
    priority = 50

    def __init__(self, options: CoreMLOptions) -> None:
        self.options = options
        self.provider: CoreMLProvider | None = None

    def devices(self) -> Sequence[Device]:
        return [CONVERTER]

    def create(self, device: Device, options: Mapping[str, Any]) -> CoreMLProvider:
        self.provider = CoreMLProvider(device, self.options, convert_only=True)
        return self.provider


class _RestProvider:
    """Stands for whatever provider runs the rest on the target (cpu); never runs."""

    name = "cpu"

    def __init__(self, device: Device) -> None:
        self.device = device
        self.allocator = HostAllocator(device)

    def capability(self, graph: GraphSpec) -> Capability:
        return Capability(nodes=tuple(n.index for n in graph.nodes))

    def kernel(self, node: NodeSpec) -> Any:
        def run(*_args: Any) -> Any:
            raise EpoxyError("epoxy-coreml-compile sessions convert only; they do not run")
        return run

    def compile(self, subgraph: SubgraphSpec) -> Any:
        raise EpoxyError("placeholder provider compiles nothing")


class _RestFactory:
    name = "cpu"
    vendor = "placeholder"
    version = __version__
    sdk_api = "1.0"  # the epoxy SDK API written against (a literal: the core checks it)
    priority = 0

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, "cpu", 0, "placeholder")]

    def create(self, device: Device, options: Mapping[str, Any]) -> _RestProvider:
        return _RestProvider(device)


def compile_model(model_path: Any, out_dir: Any, options: Mapping[str, Any] | None = None) -> CompileResult:
    """Convert every Core ML group of ``model_path`` into ``out_dir`` (see the package doc)."""
    from epoxy import InferenceSession
    from epoxy.testing import registry_with

    opts = dict(options or {})
    if "cache_dir" in opts:
        raise InvalidArgumentError("compile_model: pass the output folder as out_dir, not options['cache_dir']")
    out = Path(out_dir)
    opts["cache_dir"] = out
    parsed = TABLE.parse(opts)
    out.mkdir(parents=True, exist_ok=True)
    factory = _ConvertFactory(parsed)
    registry = registry_with(factory, _RestFactory(), plugin_name="epoxy-coreml-compile")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        session = InferenceSession(model_path, providers=["coreml", "cpu"], registry=registry)
    report = session.partition_report()
    provider = factory.provider
    compiled: list[tuple[str, CompiledPackage]] = list(provider.compiled) if provider is not None else []
    groups = []
    paths = []
    for label, package in compiled:
        if package.path is not None:
            paths.append(package.path)
        groups.append({"label": label, "nodes": report.groups.get(label, []), **package.manifest(),
                       "path": None if package.path is None else str(package.path), "cached": package.cached})
    counts = report.summary()
    total = len(report.nodes)
    summary = {
        "model": str(model_path) if isinstance(model_path, (str, Path)) else type(model_path).__name__,
        "nodes": total,
        "coreml_nodes": counts.get("coreml", 0),
        "other_nodes": total - counts.get("coreml", 0),
        "groups": len(groups),
        "packages": [str(p) for p in paths],
        "options": {"compute_precision": parsed.compute_precision,
                    "minimum_deployment_target": parsed.minimum_deployment_target},
        "declined": _declined_by_op(report),
    }
    (out / "summary.json").write_text(json.dumps({**summary, "group_details": groups}, indent=1))
    return CompileResult(paths, groups, report, summary)


def _declined_by_op(report: Any) -> dict[str, list[str]]:
    """op type -> distinct reasons coreml gave for nodes it did not take."""
    found: dict[str, list[str]] = {}
    for d in report.nodes:
        if d.provider == "coreml":
            continue
        for provider, reason in d.declined:
            if provider == "coreml" and reason not in found.setdefault(d.op_type, []):
                found[d.op_type].append(reason)
    return found


def _as_epoxy_compile(args: argparse.Namespace, options: Mapping[str, str]) -> int:
    """``epoxy compile MODEL -o OUT.onnx --providers coreml`` with these options."""
    from epoxy.cli.main import main as epoxy_main

    argv = ["compile", args.model, "-o", args.output, "--providers", "coreml"]
    for key, value in options.items():
        argv += ["--option", f"coreml.{key}={value}"]
    if args.json:
        argv.append("--json")
    return epoxy_main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="epoxy-coreml-compile",
        description="Convert the Core ML-capable parts of an ONNX model (works on any OS): -o OUT.onnx writes a "
                    "compiled model (epoxy compile --providers coreml), -o FOLDER the .mlpackage files.")
    parser.add_argument("model", help="path of the .onnx model")
    parser.add_argument("-o", "--output", required=True,
                        help="a compiled model (*.onnx), or an output folder (also the package cache)")
    parser.add_argument("--compute-precision", choices=["fp32", "fp16"], default=None)
    parser.add_argument("--minimum-deployment-target", default=None, help="iOS15 (default), iOS16, macOS13, ...")
    parser.add_argument("--report", action="store_true", help="print the per-node partition table")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    if args.compute_precision:
        options["compute_precision"] = args.compute_precision
    if args.minimum_deployment_target:
        options["minimum_deployment_target"] = args.minimum_deployment_target
    if args.output.endswith(".onnx"):
        return _as_epoxy_compile(args, options)
    try:
        result = compile_model(args.model, args.output, options)
    except EpoxyError as exc:
        print(f"epoxy-coreml-compile: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.summary, indent=1))
        return 0
    s = result.summary
    print(f"{s['coreml_nodes']}/{s['nodes']} nodes converted in {s['groups']} group(s); "
          f"{s['other_nodes']} left to other providers")
    for group in result.groups:
        where = group["path"] or "(constant outputs only, no package)"
        cached = " (cached)" if group["cached"] else ""
        print(f"  {group['label']}: {len(group['nodes'])} nodes -> {where}{cached}")
    for op, reasons in sorted(s["declined"].items()):
        print(f"  not converted: {op}: {'; '.join(reasons[:3])}")
    if args.report:
        print()
        print(result.report.format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
