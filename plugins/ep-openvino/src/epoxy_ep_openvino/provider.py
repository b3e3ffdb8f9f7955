"""The OpenVINO provider: capability (our gates + OpenVINO's frontend), grouping, compile, run.

Groups are compiled while answering ``capability`` (still at session creation): a group
OpenVINO cannot read or compile is declined with OpenVINO's reason instead of failing the
session later. ``compile`` then hands out the already compiled group.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from epoxy.contract import (
    Capability,
    CompiledArtifact,
    Device,
    FusedGroup,
    GraphSpec,
    KernelFn,
    NodeSpec,
    SubgraphSpec,
    ValueType,
)
from epoxy.errors import ArtifactRefused, ProviderError
from epoxy.kit import HostAllocator, boundary, convex_groups

from . import aot
from .options import OpenVINOOptions
from .rewrites import apply_rewrites
from .runtime import PROVIDER_NAME, import_openvino, shared_core
from .runtime import first_line as _first_line
from .specialize import ShapeKey, ShapeSpecializer, SpecializationStats
from .support import gate
from .work_size import one_thread_config

log = logging.getLogger("epoxy_ep_openvino")

#: ops whose cost is dominated by arithmetic (a group holding one usually pays for a call)
_HEAVY = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "Gemm", "MatMulInteger",
                    "QLinearMatMul", "Einsum", "LSTM", "GRU", "RNN",
                    # com.microsoft (matched by op name: their arithmetic is that of a matmul or conv)
                    "Attention", "MultiHeadAttention", "MatMulNBits", "FusedMatMul", "FusedGemm", "FusedConv",
                    "MatMulIntegerToFloat"})
_PER_NODE_US = 4.0  # what the cpu provider spends dispatching one node
_PER_ELEMENT_US = 1e-3  # ~1 ns per output element
_PER_FLOP_US = 1e-5  # ~100 GFLOP/s
_UNKNOWN_ELEMENTS = 4096
_TIMES_FILE = "epoxy_openvino_compile_times.json"
_FRAMEWORK_NODES = ("NotSupportedONNXNode", "ONNXFrameworkNode", "FrameworkNode")


def _elements(vt: ValueType) -> int | None:
    if vt.kind != "tensor" or vt.shape is None:
        return None
    total = 1
    for d in vt.shape:
        if not isinstance(d, int):
            return None
        total *= d
    return total


def node_cost_us(node: NodeSpec) -> float:
    """Rough cpu-provider time for ``node`` (dispatch + elements + arithmetic)."""
    out = sum((_elements(vt) or _UNKNOWN_ELEMENTS) for vt in node.output_types)
    cost = _PER_NODE_US + out * _PER_ELEMENT_US
    if node.op_type in _HEAVY:
        flops = None
        try:
            if node.op_type in ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"):
                a = node.input_types[0]
                k = a.shape[-1] if a.shape else None
                if node.op_type == "Gemm" and node.attr("transA", 0) and a.shape:
                    k = a.shape[0]
                n_out = _elements(node.output_types[0])
                if isinstance(k, int) and n_out is not None:
                    flops = 2 * n_out * k
            elif node.op_type in ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose"):
                w = node.input_types[3 if node.op_type == "QLinearConv" else 1]
                n_out = _elements(node.output_types[0])
                w_elems = _elements(w)
                if n_out is not None and w_elems is not None and w.shape:
                    per_out = (
                        w_elems // max(1, int(w.shape[0]))
                        if node.op_type != "ConvTranspose"
                        else w_elems // max(1, int(w.shape[1]))
                    )
                    flops = 2 * n_out * per_out
        except (IndexError, TypeError, ValueError):
            flops = None
        cost += 1000.0 if flops is None else flops * _PER_FLOP_US
    return cost


@dataclass
class GroupStats:
    """What compiling one group cost (``epoxy_ep_openvino.stats(session)`` lists these)."""

    label: str
    nodes: int
    compile_s: float
    loaded_from_cache: bool
    saved_s: float | None = None
    imported: bool = False  # from a compiled model's blob (compile_s is then the import time)
    #: 1 when the group's matrix work was below ``one_thread_below_macs`` (its multiply-adds in
    #: ``multiply_adds``); None: the configured ``num_threads``
    threads: int | None = None
    multiply_adds: int | None = None


@dataclass
class _Compiled:
    model: Any  # openvino.CompiledModel
    in_names: list[set[str]]  # names of model input port i (one of them is a group input)
    out_names: list[set[str]]
    out_dtypes: list[np.dtype]
    in_dtypes: list[np.dtype]
    stats: GroupStats
    requests: list[Any] = field(default_factory=list)


def _ov_dtype(ov_type: Any) -> np.dtype | None:
    try:
        return np.dtype(ov_type.to_dtype())
    except Exception:  # noqa: BLE001 - dynamic or exotic element type
        return None


def _shape_of(graph: GraphSpec, name: str) -> tuple[Any, ...] | None:
    vt = graph.value_type(name)
    return None if vt.kind != "tensor" or vt.shape is None else tuple(vt.shape)


_DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"


def _keep_matmuls_exact(core: Any, ov_device: str, config: dict[str, Any], options: OpenVINOOptions) -> bool:
    """At f32, turn off OpenVINO's on-the-fly int8 quantization of activations feeding
    compressed weights (MatMulNBits), which the CPU plugin does by default (group size 32):
    results would differ from onnxruntime's float MatMulNBits by ~0.1. Returns whether such
    matmuls now compute in float (or the user chose an inexact precision anyway)."""
    if options.precision != "f32":
        return True
    if _DYNAMIC_QUANTIZATION in config:
        return config[_DYNAMIC_QUANTIZATION] == 0
    try:
        supported = set(core.get_property(ov_device, "SUPPORTED_PROPERTIES"))
    except Exception:  # noqa: BLE001 - a device (AUTO, HETERO...) that cannot say
        return False
    if _DYNAMIC_QUANTIZATION not in supported:
        return False
    config[_DYNAMIC_QUANTIZATION] = 0
    return True


def _one_thread(small: int | None) -> int | None:
    """``GroupStats.threads`` of a group ``_config_for`` answered ``small`` for."""
    return None if small is None else 1


def _one_thread_text(small: int | None) -> str:
    return "" if small is None else f" on 1 thread ({small} multiply-adds, below one_thread_below_macs)"


class OpenVINOProvider:
    """Runs convex groups of nodes as OpenVINO compiled models on one OpenVINO device."""

    name = PROVIDER_NAME

    def __init__(self, device: Device, options: OpenVINOOptions) -> None:
        self.ov = import_openvino()
        self.core = shared_core()
        self.device = device
        self.allocator = HostAllocator(device)  # inputs and outputs are host numpy arrays
        self.options = options
        self.ov_device = options.device or str(device.properties.get("ov_device", device.kind.upper()))
        self.config = options.compile_config()
        self._exact_matmul = _keep_matmuls_exact(self.core, self.ov_device, self.config, options)
        self.stats: list[GroupStats] = []
        self.specializations: list[SpecializationStats] = []
        self._background: ThreadPoolExecutor | None = None
        self._background_lock = threading.Lock()
        self._compiled: dict[str, _Compiled] = {}
        #: (graph, nodes, overridable) -> the cache key of its compiled model: capability, the
        #: group's compile and the plan ask for the same group, and building its ONNX bytes again
        #: each time cost vgg19 2 x 7 s of protobuf copies (548 MB of weights) for a cache hit
        self._keys: dict[tuple[int, tuple[int, ...], bool], tuple[weakref.ref[Any], str]] = {}
        self._failed: dict[str, str] = {}
        #: kernel -> the compiled model it runs (``export_compiled`` is handed the kernel)
        self._kernels: weakref.WeakKeyDictionary[KernelFn, _Compiled] = weakref.WeakKeyDictionary()
        self._groups = 0
        self._empty_weights = self.ov.Tensor(np.empty(0, np.uint8))
        if options.cache_dir:
            os.makedirs(options.cache_dir, exist_ok=True)

    # -- capability ------------------------------------------------------------------------
    def capability(self, graph: GraphSpec) -> Capability:
        declined: dict[int, str] = {}
        candidates: list[int] = []
        for node in graph.nodes:
            why = gate(node, graph, float16=self.options.float16, exact_matmul=self._exact_matmul)
            if why is None:
                candidates.append(node.index)
            else:
                declined[node.index] = why
        if not candidates:
            return Capability(declined=declined)
        declined.update(self._frontend_declines(graph, candidates))
        supported = [i for i in candidates if i not in declined]
        groups, reasons = convex_groups(graph, supported, provider="openvino")
        declined.update(reasons)
        out: list[FusedGroup] = []
        for nodes in groups:
            cost = sum(node_cost_us(graph.nodes[i]) for i in nodes)
            if cost < self.options.min_group_cost:
                why = (f"group of {len(nodes)} node(s) too small for an openvino call "
                       f"(estimated {cost:.0f} µs on cpu < min_group_cost {self.options.min_group_cost:g})")
                declined.update({i: why for i in nodes})
                continue
            label = f"openvino_{self._groups}"
            try:
                self._compile_nodes(graph, nodes, label)
                self.compile(SubgraphSpec(FusedGroup(tuple(nodes), label), graph, *map(tuple, boundary(graph, nodes))))
            except Exception as exc:  # noqa: BLE001 - OpenVINO could not take it: cpu will
                why = f"openvino could not compile the group: {_first_line(exc)}"
                declined.update({i: why for i in nodes})
                continue
            self._groups += 1
            out.append(FusedGroup(tuple(nodes), label))
        return Capability(groups=tuple(out), declined=declined)

    def _frontend_declines(self, graph: GraphSpec, candidates: Sequence[int]) -> dict[int, str]:
        """Nodes OpenVINO's ONNX frontend cannot convert (partial conversion of the candidates)."""
        try:
            return self._partial_convert(graph, candidates)
        except Exception as exc:  # noqa: BLE001 - the frontend failed on the whole: ask node by node
            log.debug("openvino: partial conversion failed (%s); checking nodes one by one", _first_line(exc))
        declined: dict[int, str] = {}
        for i in candidates:
            try:
                declined.update(self._partial_convert(graph, [i]))
            except Exception as exc:  # noqa: BLE001
                declined[i] = f"openvino's ONNX frontend failed: {_first_line(exc)}"
        return declined

    def _partial_convert(self, graph: GraphSpec, nodes: Sequence[int]) -> dict[int, str]:
        from openvino.frontend import FrontEndManager

        proto = graph.to_model(list(nodes))
        frontend = FrontEndManager().load_by_framework("onnx")
        model = frontend.convert_partially(frontend.load(io.BytesIO(proto.SerializeToString())))
        wanted = set(nodes)
        declined: dict[int, str] = {}
        for op in model.get_ordered_ops():
            type_name = op.get_type_name()
            if type_name not in _FRAMEWORK_NODES:
                continue
            attrs = op.get_attributes()
            onnx_type = attrs.get("ONNX_META_type", type_name)
            for port in op.outputs():
                for name in port.get_names():
                    p = graph.producer(name)
                    if p is not None and p in wanted:
                        declined[p] = f"openvino's ONNX frontend cannot convert {onnx_type} ({type_name})"
        return declined

    # -- compile ---------------------------------------------------------------------------
    def _model_bytes(self, graph: GraphSpec, nodes: Sequence[int], overridable: bool) -> tuple[bytes, str]:
        """The group as ONNX bytes and its cache key. Initializers that are also graph inputs
        are baked in (OpenVINO folds them, like native OpenVINO) unless ``overridable``, the
        variant used when a run feeds such an input."""
        proto = graph.to_model(list(nodes))
        apply_rewrites(proto, lambda name: _shape_of(graph, name))
        graph_inputs = set(graph.inputs) if overridable else set()
        moved = [t for t in proto.graph.initializer if t.name in graph_inputs]
        if moved:
            from onnx import helper

            for t in moved:
                proto.graph.initializer.remove(t)
                vt = graph.value_type(t.name)
                proto.graph.input.append(
                    helper.make_tensor_value_info(
                        t.name, t.data_type, vt.shape if vt.shape is not None else list(t.dims)
                    )
                )
        data = proto.SerializeToString()
        key = hashlib.sha1(data + repr(sorted(self.config.items())).encode() + self.ov_device.encode()).hexdigest()
        return data, key

    def _compile_nodes(
        self, graph: GraphSpec, nodes: Sequence[int], label: str, overridable: bool = False
    ) -> _Compiled:
        memo = (id(graph), tuple(nodes), overridable)
        known = self._keys.get(memo)
        if known is not None and known[0]() is graph and known[1] in self._compiled:
            return self._compiled[known[1]]
        data, key = self._model_bytes(graph, nodes, overridable)
        self._keys[memo] = (weakref.ref(graph), key)
        found = self._compiled.get(key)
        if found is not None:
            return found
        if key in self._failed:
            raise RuntimeError(self._failed[key])
        t0 = time.perf_counter()
        try:
            model = self.core.read_model(model=data, weights=self._empty_weights)
            config, small = self._config_for(model)
            compiled = self.core.compile_model(model, self.ov_device, config)
        except Exception as exc:
            self._failed[key] = _first_line(exc)
            raise
        seconds = time.perf_counter() - t0
        from_cache = False
        if self.options.cache_dir:
            try:
                from_cache = bool(compiled.get_property("LOADED_FROM_CACHE"))
            except Exception:  # noqa: BLE001 - older OpenVINO or device without the property
                from_cache = False
        stats = GroupStats(label, len(nodes), seconds, from_cache, threads=_one_thread(small), multiply_adds=small)
        if self.options.cache_dir:
            stats.saved_s = self._record_compile_time(key, seconds, from_cache)
        entry = self._entry(compiled, graph, stats)
        self._compiled[key] = entry
        self.stats.append(stats)
        log.info("openvino: compiled %s (%d nodes) on %s in %.3f s%s%s", label, len(nodes), self.ov_device, seconds,
                 " (loaded from cache)" if from_cache else "", _one_thread_text(small))
        return entry

    def _config_for(self, model: Any) -> tuple[dict[str, Any], int | None]:
        """The compile properties for ``model`` (an ``openvino.Model``): one thread when its
        matrix work is below ``one_thread_below_macs`` (``work_size``), and that work."""
        return one_thread_config(self.config, model, self.options.one_thread_below_macs, self.ov_device)

    def _entry(self, compiled: Any, graph: GraphSpec, stats: GroupStats) -> _Compiled:
        """A compiled model's ports (names, dtypes) and its first infer request."""
        in_names = [set(p.get_names()) for p in compiled.inputs]
        out_names = [set(p.get_names()) for p in compiled.outputs]
        in_dtypes = []
        for port, names in zip(compiled.inputs, in_names):
            dtype = _ov_dtype(port.get_element_type())
            if dtype is None:
                known = [graph.value_type(n).dtype for n in names if graph.value_type(n).dtype is not None]
                dtype = known[0] if known else np.dtype(np.float32)
            in_dtypes.append(dtype)
        entry = _Compiled(compiled, in_names, out_names,
                          [_ov_dtype(p.get_element_type()) for p in compiled.outputs], in_dtypes, stats)
        entry.requests.append(compiled.create_infer_request())
        return entry

    def _record_compile_time(self, key: str, seconds: float, from_cache: bool) -> float | None:
        """Remember first-compile times next to OpenVINO's blobs; return the time saved now."""
        path = os.path.join(self.options.cache_dir or "", _TIMES_FILE)
        try:
            with open(path) as f:
                times = json.load(f)
        except (OSError, ValueError):
            times = {}
        if from_cache:
            before = times.get(key)
            return None if before is None else max(0.0, float(before) - seconds)
        times[key] = seconds
        try:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(times, f)
            os.replace(tmp, path)
        except OSError:
            pass
        return None

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        return self._kernel(subgraph, None)

    def _kernel(self, subgraph: SubgraphSpec, entry: _Compiled | None) -> KernelFn:
        """The group's kernel around ``entry`` (compiled now when None); an initializer-backed
        input fed by the caller switches to a variant compiled on first use."""
        main = self._make_runner(subgraph, overridable=False, entry=entry)
        graph = subgraph.graph
        graph_inputs = set(graph.inputs)
        baked = [(k, graph.constant(name)) for k, name in enumerate(subgraph.inputs)
                 if name in graph_inputs and graph.constant(name) is not None]
        if not baked:
            return main
        variant: list[KernelFn] = []

        def run(*args: Any) -> tuple[Any, ...]:
            for pos, value in baked:
                if args[pos] is not value:  # the caller fed an initializer-backed input
                    if not variant:
                        variant.append(self._make_runner(subgraph, overridable=True))
                    return variant[0](*args)
            return main(*args)

        self._kernels[run] = self._kernels[main]
        return run

    def _make_runner(self, subgraph: SubgraphSpec, *, overridable: bool, entry: _Compiled | None = None) -> KernelFn:
        graph = subgraph.graph
        nodes = subgraph.group.nodes
        label = subgraph.group.label or f"openvino_{self._groups}"
        if entry is None:
            try:
                entry = self._compile_nodes(graph, nodes, label, overridable)
            except Exception as exc:
                raise self._error(graph, nodes, label, "compile", exc) from exc
        feeds, fetch = self._bind(entry, subgraph, label)
        run = self._runner(entry, feeds, fetch, graph, nodes, label)
        self._kernels[run] = entry
        dynamic = [pos for _, pos, _, shape, _ in feeds if shape is None]
        if not (self.options.specialize_shapes and self.options.max_shape_specializations and dynamic):
            return run  # all inputs static already (or specializing is off)

        def build(key: ShapeKey) -> KernelFn:
            special = self._compile_static(graph, nodes, label, overridable, entry, feeds, key)
            if special.stats.threads == 1:
                stats.one_thread += 1  # builds run on the provider's one background thread
            return self._runner(special, *self._bind(special, subgraph, label), graph, nodes, label)

        stats = SpecializationStats(label)
        self.specializations.append(stats)
        specialized = ShapeSpecializer(run, dynamic, build, self._submit, self.options.max_shape_specializations,
                                       stats).runner()
        self._kernels[specialized] = entry
        return specialized

    # -- ahead-of-time compile (SDK API 1.2; the blob layout is artifacts.py's) ----------------
    def export_compiled(self, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
        """OpenVINO's export of the model ``kernel`` runs (the dynamic one for a dynamic group:
        specializations are compiled again after import, as in a fresh session)."""
        entry = self._kernels.get(kernel)
        if entry is None:
            return None  # not a kernel this provider compiled in this session
        return aot.export(self, entry.model, entry.in_names, entry.out_names, subgraph)

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
        """A kernel from a blob ``export_compiled`` wrote; ``ArtifactRefused`` says why not."""
        compiled, seconds = aot.load(self, subgraph, artifact)
        label = subgraph.group.label or f"openvino_{self._groups}"
        stats = GroupStats(label, len(subgraph.group.nodes), seconds, False, imported=True)
        try:
            kernel = self._kernel(subgraph, self._entry(compiled, subgraph.graph, stats))
        except ProviderError as exc:
            raise ArtifactRefused(f"the imported model does not fit group {label!r}: {exc}",
                                  provider=self.name) from exc
        self.stats.append(stats)
        log.info("openvino: imported %s (%d nodes) on %s in %.3f s", label, len(subgraph.group.nodes),
                 self.ov_device, seconds)
        return kernel

    def _bind(
        self, entry: _Compiled, subgraph: SubgraphSpec, label: str
    ) -> tuple[list[tuple[int, int, np.dtype, tuple[int, ...] | None, int]], list[tuple[int, np.dtype | None]]]:
        """(feeds, fetch): for each model input port, the group argument it takes (its dtype,
        static shape and size); for each group output, the model output port and a cast."""
        graph = subgraph.graph
        nodes = subgraph.group.nodes
        positions = {name: k for k, name in enumerate(subgraph.inputs)}
        feeds = []
        for port, names in enumerate(entry.in_names):
            found = sorted(n for n in names if n in positions)
            if not found:
                raise self._error(graph, nodes, label, "compile",
                                  RuntimeError(f"model input {sorted(names)} is not a group input"))
            pshape = entry.model.inputs[port].get_partial_shape()
            shape = tuple(d.get_length() for d in pshape) if pshape.is_static else None
            size = int(np.prod(shape, dtype=np.int64)) if shape is not None else -1
            feeds.append((port, positions[found[0]], entry.in_dtypes[port], shape, size))
        out_port: dict[str, int] = {}
        for port, names in enumerate(entry.out_names):
            for name in names:
                out_port.setdefault(name, port)
        lost = [n for n in subgraph.outputs if n not in out_port]
        if lost:
            raise self._error(
                graph, nodes, label, "compile", RuntimeError(f"group outputs {lost} have no OpenVINO port")
            )
        fetch = []
        for name in subgraph.outputs:
            port = out_port[name]
            want = graph.value_type(name).dtype
            have = entry.out_dtypes[port]
            fetch.append((port, want if (want is not None and have is not None and want != have) else None))
        return feeds, fetch

    def _compile_static(
        self,
        graph: GraphSpec,
        nodes: Sequence[int],
        label: str,
        overridable: bool,
        entry: _Compiled,
        feeds: list[tuple[int, int, np.dtype, tuple[int, ...] | None, int]],
        key: ShapeKey,
    ) -> _Compiled:
        """The group compiled again, reshaped to the static input shapes ``key`` (one per
        dynamic port of ``entry``, in port order). Runs in the background thread; the model
        bytes are made again rather than kept (they hold the weights)."""
        data, _ = self._model_bytes(graph, nodes, overridable)
        t0 = time.perf_counter()
        model = self.core.read_model(model=data, weights=self._empty_weights)
        shapes = iter(key)
        wanted = {port: next(shapes) for port, _, _, shape, _ in feeds if shape is None}
        new_shapes = {}
        for i, port in enumerate(model.inputs):
            names = set(port.get_names())
            match = [p for p in wanted if entry.in_names[p] & names]
            if match:
                new_shapes[i] = self.ov.PartialShape(list(wanted[match[0]]))
        model.reshape(new_shapes)
        config, small = self._config_for(model)
        compiled = self.core.compile_model(model, self.ov_device, config)
        stats = GroupStats(f"{label}{list(key)}", len(nodes), time.perf_counter() - t0, False,
                           threads=_one_thread(small), multiply_adds=small)
        return self._entry(compiled, graph, stats)

    def _submit(self, job: Any) -> Any:
        """Run ``job`` on the provider's background compile thread (one: compiles queue)."""
        with self._background_lock:
            if self._background is None:
                self._background = ThreadPoolExecutor(1, thread_name_prefix="epoxy-openvino-specialize")
            return self._background.submit(job)

    def wait_for_specializations(self, timeout: float | None = None) -> None:
        """Block until the specializations queued so far are compiled (tests, benchmarks)."""
        with self._background_lock:
            background = self._background
        if background is not None:
            background.submit(lambda: None).result(timeout)

    def _runner(
        self,
        entry: _Compiled,
        feeds: list[tuple[int, int, np.dtype, tuple[int, ...] | None, int]],
        fetch: list[tuple[int, np.dtype | None]],
        graph: GraphSpec,
        nodes: Sequence[int],
        label: str,
    ) -> KernelFn:
        Tensor = self.ov.Tensor
        pool = entry.requests
        create = entry.model.create_infer_request
        ndarray = np.ndarray
        ascontiguous = np.ascontiguousarray
        error = self._error

        def run(*args: Any) -> tuple[Any, ...]:
            request = pool.pop() if pool else create()
            converted = []  # shared tensors do not own their memory: keep converted copies alive
            try:
                for port, pos, dtype, shape, size in feeds:
                    value = args[pos]
                    if type(value) is not ndarray or value.dtype != dtype:
                        value = ascontiguous(value, dtype=dtype)
                    if shape is not None and value.shape != shape and value.size == size:
                        value = value.reshape(shape)  # e.g. [1] where the model says [] (scan bodies)
                    flags = value.flags
                    if not (flags.c_contiguous and flags.writeable):  # OpenVINO shares writeable buffers only
                        value = value.copy()
                    if value is not args[pos]:
                        converted.append(value)
                    request.set_input_tensor(port, Tensor(value, shared_memory=True))
                request.infer()
                results = []
                for port, cast in fetch:
                    data = request.get_output_tensor(port).data
                    results.append(data.copy() if cast is None else data.astype(cast))
            except Exception as exc:
                raise error(graph, nodes, label, "run", exc) from exc
            finally:
                pool.append(request)
            return tuple(results)

        return run

    def _error(
        self, graph: GraphSpec, nodes: Sequence[int], label: str, when: str, exc: BaseException
    ) -> ProviderError:
        names = [graph.nodes[i].name for i in nodes]
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} nodes)" if len(names) > 8 else "")
        return ProviderError(
            f"openvino {when} failed for group {label!r} (nodes {shown}) on {self.device.label} "
            f"(OpenVINO device {self.ov_device}): {_first_line(exc)}",
            provider=self.name,
        )

    def kernel(self, node: NodeSpec) -> KernelFn:
        raise ProviderError(f"openvino runs fused groups only; node {node.name!r} was never claimed singly",
                            provider=self.name)

    # -- reporting ---------------------------------------------------------------------------
    def compiled_models(self) -> list[Any]:
        """The OpenVINO compiled models of this provider's groups, in compile order."""
        return [entry.model for entry in self._compiled.values()]

    def cache_summary(self) -> str:
        """One line: compile time, groups loaded from the cache and the time that saved."""
        total = sum(s.compile_s for s in self.stats)
        hits = [s for s in self.stats if s.loaded_from_cache]
        saved = sum(s.saved_s or 0.0 for s in hits)
        text = f"openvino: {len(self.stats)} group(s) compiled in {total:.3f} s on {self.ov_device}"
        imported = sum(s.imported for s in self.stats)
        if imported:
            text += f" ({imported} imported from compiled blobs)"
        if self.options.cache_dir:
            text += f"; {len(hits)} loaded from cache {self.options.cache_dir!r}, saving {saved:.3f} s"
        return text + self.specialization_summary()

    def specialization_stats(self) -> list[dict[str, Any]]:
        """Per group label, its specializations' counters summed (a group may have several runners)."""
        merged: dict[str, SpecializationStats] = {}
        for s in self.specializations:
            m = merged.setdefault(s.label, SpecializationStats(s.label))
            for f in fields(SpecializationStats):
                if f.name != "label":
                    setattr(m, f.name, getattr(m, f.name) + getattr(s, f.name))
        return [asdict(m) for m in merged.values()]

    def specialization_summary(self) -> str:
        """``; N shape specialization(s) ...`` when any group was specialized (else empty)."""
        specs = self.specializations
        compiled = sum(s.compiled for s in specs)
        failed = sum(s.failed for s in specs)
        if not (compiled or failed):
            return ""
        return (f"; {compiled} shape specialization(s) compiled in {sum(s.compile_s for s in specs):.3f} s "
                f"({sum(s.specialized_runs for s in specs)} runs on them, "
                f"{sum(s.dynamic_runs for s in specs)} on dynamic dims, {failed} shape(s) left dynamic, "
                f"{sum(s.evicted for s in specs)} evicted)")
