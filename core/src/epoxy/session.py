"""``InferenceSession``: load -> optimize -> partition -> plan, then ``run`` the plan."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .contract import Allocator, Provider, ValueType
from .control_flow import ControlFlowProvider
from .device_io import DeviceIO
from .dtypes import describe_dtype
from .errors import InvalidArgumentError, ProviderError
from .executor import SequentialExecutor
from .feeds import check_feeds
from .functions import inline_local_functions, partition_graph, reinfer_shapes
from .limits import check_feeds as check_feed_sizes
from .limits import check_planned_peak, check_static_values, memory_limit_scope
from .loader import ModelSource, load_model
from .optimizer import optimize
from .options import SessionOptions
from .parallel_executor import ParallelExecutor
from .placement import HOST, IOPlacement, device_key
from .plan_builder import build_plan
from .plugins import ProviderRegistry, default_registry, strict_mode
from .profiling import Profiler, ProfilingExecutor
from .report import PartitionReport
from .threads import set_blas_threads

FALLBACK_PROVIDER = "cpu"

_ORT_TYPE_NAMES = {
    "float32": "float", "float64": "double", "object": "string",
}


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()``/``get_outputs()`` describe it (onnxruntime style)."""

    name: str
    type: str
    shape: list[int | str | None] | None
    value_type: ValueType

    @property
    def dtype(self) -> Any:
        return self.value_type.dtype


def _type_string(vt: ValueType) -> str:
    if vt.kind == "tensor":
        name = describe_dtype(vt.dtype)
        return f"tensor({_ORT_TYPE_NAMES.get(name, name)})"
    if vt.kind in ("sequence", "optional"):
        return f"{vt.kind}({_type_string(vt.element or ValueType())})"
    return "unknown"


def _normalize_providers(
    providers: Sequence[Any] | None, provider_options: Any, registry: ProviderRegistry
) -> list[tuple[str, dict[str, Any]]]:
    if providers is None:
        names = [e.name for e in registry.entries() if e.available]
        pairs: list[tuple[str, dict[str, Any]]] = [(n, {}) for n in names]
    else:
        if isinstance(providers, str):
            raise InvalidArgumentError("providers must be a list of names, e.g. ['cpu'], not a string")
        pairs = []
        for item in providers:
            if isinstance(item, str):
                pairs.append((item, {}))
            elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], Mapping):
                pairs.append((item[0], dict(item[1])))
            else:
                raise InvalidArgumentError(f"provider entries must be names or (name, options) pairs, got {item!r}")
    if provider_options is not None:
        if isinstance(provider_options, Mapping):
            for i, (name, opts) in enumerate(pairs):
                pairs[i] = (name, {**opts, **dict(provider_options.get(name, {}))})
        else:
            if len(provider_options) != len(pairs):
                raise InvalidArgumentError("provider_options must have one entry per provider")
            pairs = [(n, {**o, **dict(extra)}) for (n, o), extra in zip(pairs, provider_options)]
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise InvalidArgumentError(f"provider {name!r} listed twice")
        seen.add(name)
    return pairs


def _select_device(entry: Any, options: dict[str, Any]) -> Any:
    devices = entry.devices()
    index = options.pop("device_index", 0)
    if not isinstance(index, int) or not 0 <= index < len(devices):
        raise InvalidArgumentError(
            f"provider {entry.name!r}: device_index {index!r} out of range (found {len(devices)} devices)"
        )
    return devices[index]


class InferenceSession:
    """Run an ONNX model, each node on the best provider that claims it.

    ``model``: a path, bytes or ``onnx.ModelProto``. ``providers``: names (or
    ``(name, options)`` pairs) in priority order; default: every available provider by
    priority. cpu is appended as the fallback unless ``sess_options.disable_fallback``.
    """

    def __init__(
        self,
        model: ModelSource,
        providers: Sequence[Any] | None = None,
        provider_options: Any = None,
        sess_options: SessionOptions | None = None,
        *,
        registry: ProviderRegistry | None = None,
    ) -> None:
        self._options = sess_options or SessionOptions()
        self._options.validate()
        self._registry = registry or default_registry()
        self.timings: dict[str, float] = {}
        notes: list[str] = []
        t0 = time.perf_counter()
        limit = self._options.memory_limit_bytes
        loaded = load_model(model, check=self._options.check_model, infer_shapes=self._options.infer_shapes,
                            memory_limit=limit)
        if limit is not None:
            check_static_values(loaded.model.graph, limit)
        for note in loaded.warnings:
            warnings.warn(note, RuntimeWarning, stacklevel=2)
        notes.extend(loaded.warnings)
        t1 = time.perf_counter()
        chosen = self._create_providers(providers, provider_options, notes)
        names = [name for name, _ in chosen]
        inlined = inline_local_functions(loaded.model)
        if inlined:
            notes.append(f"inlined {inlined} call(s) of model-local functions")
        self.applied_passes = optimize(
            loaded.model, self._registry.passes(), self._options.graph_optimization_level, names, notes
        )
        t2 = time.perf_counter()
        if self._options.intra_op_num_threads:  # before kernels are built: some time themselves
            set_blas_threads(self._options.intra_op_num_threads)
        with memory_limit_scope(limit):  # kernels bind the limit for outputs sized at run time
            graph, parts, built, chosen, t3 = self._partition_and_plan(loaded, chosen, notes)
        names = [name for name, _ in chosen]
        if limit is not None:
            check_planned_peak(built.memory.planned_peak_bytes, limit)
        t4 = time.perf_counter()
        self.timings = {"load": t1 - t0, "optimize": t2 - t1, "partition": t3 - t2, "plan": t4 - t3}
        self._graph = graph
        self._model = loaded.model
        self._providers = chosen
        self._plan = built.plan
        self._memory = built.memory
        self._profiler: Profiler | None = Profiler() if self._options.enable_profiling else None
        self._executor = self._make_executor(built.plan)
        self._report = PartitionReport(
            providers=names,
            nodes=parts.decisions,
            groups={u.label: [graph.nodes[i].name for i in u.nodes] for u in parts.units if u.fused},
            notes=notes,
        )
        constants = graph.constants()
        self._inputs = [n for n in graph.inputs if n not in constants]
        self._overridable = [n for n in graph.inputs if n in constants]
        self._input_types = {n: graph.value_type(n) for n in graph.inputs}
        # where each feed goes: graph inputs, or the host slot of an overridden initializer
        self._feed_slots = {**{n: built.plan.slot_names.index(n) for n in self._overridable
                               if n in built.plan.slot_names}, **built.plan.input_slots}
        self._device_io = _device_io(built.plan, self._feed_slots, chosen, self._make_executor)

    # -- construction helpers ------------------------------------------------------------
    def _partition_and_plan(self, loaded: Any, chosen: list[tuple[str, Provider]], notes: list[str]) -> Any:
        """Partition and plan. A provider whose capability(), kernel() or compile() fails is
        skipped for this session, the reason in the report notes (an error in strict mode,
        ``EPOXY_STRICT_PLUGINS=1``); the fallback's failures are always errors."""
        while True:
            names = [name for name, _ in chosen]
            fallback = FALLBACK_PROVIDER if FALLBACK_PROVIDER in names and not self._options.disable_fallback else None
            # the core's control-flow provider comes first; it compiles subgraphs over `chosen`
            core = ControlFlowProvider(chosen, fallback)
            core.memory_limit = self._options.memory_limit_bytes
            core.max_loop_iterations = self._options.max_loop_iterations
            everyone = [(core.name, core), *chosen]
            infer = self._options.infer_shapes
            try:
                graph, parts = partition_graph(
                    loaded.model.graph, loaded.model.opset_imports, everyone, fallback,
                    on_expand=(lambda: reinfer_shapes(loaded.model)) if infer else None, notes=notes,
                )
                t3 = time.perf_counter()
                built = build_plan(graph, parts, dict(everyone),
                                   fold_constants=self._options.graph_optimization_level != "disable")
            except ProviderError as exc:
                failed = exc.provider
                if failed is None or failed == fallback or failed not in names or len(chosen) < 2 or strict_mode():
                    raise
                note = f"provider {failed!r} skipped for this session: {exc}"
                warnings.warn(note, RuntimeWarning, stacklevel=3)
                notes.append(note)
                chosen = [(n, p) for n, p in chosen if n != failed]
                continue
            notes.extend(core.summaries())
            if built.folded:
                notes.append(f"constant-folded {len(built.folded)} node(s) at session creation")
            return graph, parts, built, chosen, t3

    def _make_executor(self, plan: Any) -> Any:
        if self._profiler is not None:
            return ProfilingExecutor(plan, self._profiler)
        if self._options.execution_mode == "parallel":
            return ParallelExecutor(plan, self._options.inter_op_num_threads or 2)
        return SequentialExecutor(plan)

    def _create_providers(self, providers: Any, provider_options: Any, notes: list[str]) -> list[tuple[str, Provider]]:
        pairs = _normalize_providers(providers, provider_options, self._registry)
        if providers is None:  # say why installed providers are not in the default list
            notes.extend(f"provider {e.name!r} unavailable: {e.unavailable_reason}"
                         for e in self._registry.entries() if not e.available)
        if (not self._options.disable_fallback and FALLBACK_PROVIDER not in [n for n, _ in pairs]
                and self._registry.get(FALLBACK_PROVIDER) is not None):
            pairs.append((FALLBACK_PROVIDER, {}))
        created: list[tuple[str, Provider]] = []
        for name, options in pairs:
            entry = self._registry.get(name)
            if entry is None:
                failed = [f for f in self._registry.failures if f.plugin == name]
                why = f" (plugin failed: {failed[0].reason})" if failed else ""
                raise InvalidArgumentError(
                    f"unknown provider {name!r}{why}; installed: {[e.name for e in self._registry.entries()]}"
                )
            if not entry.available:
                note = f"provider {name!r} skipped: {entry.unavailable_reason}"
                warnings.warn(note, RuntimeWarning, stacklevel=3)
                notes.append(note)
                continue
            device = _select_device(entry, options)
            try:
                provider = entry.factory.create(device, options)
            except InvalidArgumentError:
                raise
            except Exception as exc:
                error = ProviderError(
                    f"provider {name!r} failed to start on {device.label}: {type(exc).__name__}: {exc}",
                    provider=name,
                )
                # a provider the user did not ask for (default list) must not break every session
                if providers is not None or name == FALLBACK_PROVIDER or strict_mode():
                    raise error from exc
                note = f"provider {name!r} skipped: {error}"
                warnings.warn(note, RuntimeWarning, stacklevel=3)
                notes.append(note)
                continue
            created.append((name, provider))
        if not created:
            raise InvalidArgumentError("no usable provider: " + ("; ".join(notes) or "none requested"))
        return created

    # -- onnxruntime-style surface ---------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """Inputs a run must feed (initializer-backed inputs are optional overrides)."""
        return [self._node_arg(n) for n in self._inputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Inputs that have an initializer default and may be fed to override it."""
        return [self._node_arg(n) for n in self._overridable]

    def get_outputs(self) -> list[NodeArg]:
        return [self._node_arg(n) for n in self._graph.outputs]

    def get_providers(self) -> list[str]:
        """Providers in use, in priority order."""
        return [name for name, _ in self._providers]

    def get_provider(self, name: str) -> Provider:
        """The provider object this session created for ``name``: what a device binding
        (e.g. ep-cuda's IOBinding) needs to convert values with its allocator."""
        for provider_name, provider in self._providers:
            if provider_name == name:
                return provider
        raise InvalidArgumentError(f"provider {name!r} is not used by this session; it uses {self.get_providers()}")

    def io_placement(self) -> IOPlacement:
        """Where each graph input is read and each output produced: device keys, device
        slots, copy steps (see :mod:`epoxy.placement`)."""
        return self._plan.io

    def get_devices(self) -> dict[str, str]:
        """Names ``run_options={"output_device": ...}`` accepts -> device key (provider
        names, device labels, ``"host"``)."""
        return dict(self._device_io.devices)

    def partition_report(self) -> PartitionReport:
        """For every node: the provider chosen, its fused group, why earlier providers declined."""
        return self._report

    def memory_plan(self) -> dict[str, object]:
        """Planned memory per device (buffers reused by liveness) and constant bytes."""
        return self._memory.summary()

    @property
    def planned_peak_bytes(self) -> int:
        return self._memory.planned_peak_bytes

    def end_profiling(self, path: str | None = None) -> str:
        """Write the Chrome trace of the profiled runs; returns its path (profiling must be on)."""
        if self._profiler is None:
            raise InvalidArgumentError("profiling is off: create the session with SessionOptions(enable_profiling=True)")
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        return self._profiler.write(path or f"{self._options.profile_file_prefix}_{stamp}.json")

    def profile_summary(self, limit: int = 15) -> list[dict[str, Any]]:
        """Time per op type over the profiled runs, largest first."""
        if self._profiler is None:
            raise InvalidArgumentError("profiling is off: create the session with SessionOptions(enable_profiling=True)")
        return self._profiler.top_ops(limit)

    def _node_arg(self, name: str) -> NodeArg:
        vt = self._graph.value_type(name)
        return NodeArg(name, _type_string(vt), None if vt.shape is None else list(vt.shape), vt)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None) -> list[Any]:
        """Run the model; returns the requested outputs (all when ``output_names`` is None).

        Feeds are numpy arrays, or device values a provider's allocator ``accepts`` (placed
        in that device's slot without the upload copy). ``run_options``: a dict;
        ``{"output_device": "cuda"}`` (or ``{output name: device}``) returns outputs produced
        on that device as device values, without the download copy (an error names the
        output and where it is produced when it is not produced there).
        """
        io = self._device_io
        on_device = io.device_feeds(input_feed) if io.accepting else None
        feeds = check_feeds(input_feed, self._input_types, set(self._inputs), on_device)
        if self._options.memory_limit_bytes is not None:
            check_feed_sizes(feeds, self._options.memory_limit_bytes)
        outputs = self._plan.output_slots
        if output_names is None:
            names: Sequence[str] = self._graph.outputs
            fetch = [outputs[n] for n in names]
        else:
            if isinstance(output_names, str):
                raise InvalidArgumentError("output_names must be a list of names, not a string")
            names, fetch = output_names, []
            for name in output_names:
                if name not in outputs:
                    raise InvalidArgumentError(f"unknown output {name!r}; the model's outputs are {self._graph.outputs}")
                fetch.append(outputs[name])
        fetch_on_device = io.output_devices(names, run_options) if run_options is not None else None
        if on_device or fetch_on_device:
            return io.run(feeds, on_device or {}, names, fetch_on_device or {})
        slots = self._feed_slots
        return self._executor.run([(slots[n], v) for n, v in feeds.items()], fetch)


def _device_io(plan: Any, feed_slots: Mapping[str, int], providers: Sequence[tuple[str, Provider]],
               make_executor: Any) -> DeviceIO:
    """Device-feed/fetch routing over the session's providers (first provider per device)."""
    allocators: dict[str, Allocator] = {}
    devices = {HOST: HOST}
    for name, provider in providers:
        key = device_key(provider.allocator)
        allocators.setdefault(key, provider.allocator)
        devices.setdefault(name, key)
        devices.setdefault(key, key)
    return DeviceIO(plan, feed_slots, allocators, devices, make_executor)
