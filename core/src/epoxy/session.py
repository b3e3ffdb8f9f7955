"""``InferenceSession``: load -> optimize -> partition -> plan, then ``run`` the plan."""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .aot.capture import active as active_capture
from .aot.format import METADATA_KEY as COMPILED_METADATA_KEY
from .aot.providers import AotProvider, ArtifactLedger, RecordedPartition, wrap
from .aot.reader import CompiledModelReader
from .api.device_io import DeviceIO
from .api.ort_value import OrtValue, feed_value
from .api.runtime_info import session_logger
from .api.value_devices import session_devices
from .contract import Allocator, Provider, ValueType
from .control_flow import ControlFlowProvider
from .errors import InvalidArgumentError, ProviderError, RunTerminatedError
from .graph.constant_data import drop_constant_data
from .graph.dtypes import describe_dtype
from .graph.type_strings import type_string as _type_string
from .load.functions import inline_local_functions, reinfer_shapes
from .load.loader import ModelSource, load_model
from .load.model_edits import model_edits, save_optimized
from .load.model_meta import ModelMetadata
from .optimize import LoadTimePasses, optimize, with_work_done_while_loading
from .options import RunOptions, SessionOptions
from .partition.report import PartitionReport
from .plan.compile_graph import partition_and_plan
from .plan.gc_pause import collector_paused
from .plan.placement import HOST, IOPlacement, device_key
from .plan.released_constants import release as release_constants
from .plugins import ProviderRegistry, default_registry, strict_mode
from .run.executor import SequentialExecutor
from .run.feeds import ExactFeeds, check_feeds
from .run.limits import check_feeds as check_feed_sizes
from .run.limits import check_planned_peak, check_static_values, memory_limit_scope
from .run.output_checks import checks_requested, with_output_checks
from .run.output_safety import detach_aliases, owners_of
from .run.parallel_executor import ParallelExecutor
from .run.profiling import Profiler, ProfilingExecutor
from .run.run_bound import run_stop
from .run.shape_cache_setup import shape_caching_executor
from .run.threads import set_blas_threads

FALLBACK_PROVIDER = "cpu"
#: onnxruntime provider names -> the epoxy package whose provider declares that alias (hints only)
ORT_PROVIDER_PACKAGES = {
    "CPUExecutionProvider": "epoxy-ep-cpu (plugins/ep-cpu)",
    "CUDAExecutionProvider": "epoxy-ep-cuda (plugins/ep-cuda)",
    "OpenVINOExecutionProvider": "epoxy-ep-openvino (plugins/ep-openvino)",
    "CoreMLExecutionProvider": "epoxy-ep-coreml (plugins/ep-coreml)",
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
            elif (
                isinstance(item, (tuple, list))
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], Mapping)
            ):
                pairs.append((item[0], dict(item[1])))
            else:
                raise InvalidArgumentError(f"provider entries must be names or (name, options) pairs, got {item!r}")
    if provider_options is not None:
        if isinstance(provider_options, Mapping):  # keyed by name or alias, whichever either side used
            by_provider = {registry.canonical_name(key): opts for key, opts in provider_options.items()}
            listed = {registry.canonical_name(name) for name, _ in pairs}
            stray = [key for key in provider_options if registry.canonical_name(key) not in listed]
            if stray:
                raise InvalidArgumentError(f"provider_options names {stray[0]!r}, which is not in providers "
                                           f"{[name for name, _ in pairs]}")
            for i, (name, opts) in enumerate(pairs):
                pairs[i] = (name, {**opts, **dict(by_provider.get(registry.canonical_name(name), {}))})
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


#: what a session keeps of its own when it takes over a measured candidate's session
_OWN_STATE = frozenset({"_options", "_source", "_registry", "_fallback_on_failure"})


def _auto_policy(providers: Any) -> str | None:
    from .devices.selection import auto_policy

    return auto_policy(providers) if providers is not None else None


def _select_device(entry: Any, options: dict[str, Any]) -> Any:
    devices = entry.devices()
    if "device_id" in options and "device_index" in options:
        raise InvalidArgumentError(f"provider {entry.name!r}: give device_index or onnxruntime's device_id, not both")
    index = options.pop("device_index", options.pop("device_id", 0))  # device_id: onnxruntime's name
    if isinstance(index, str) and index.strip().isdigit():  # onnxruntime's options are often strings
        index = int(index)
    if not isinstance(index, int) or not 0 <= index < len(devices):
        raise InvalidArgumentError(
            f"provider {entry.name!r}: device_index {index!r} out of range (found {len(devices)} devices)"
        )
    return devices[index]


def _compile_devices(entry: Any) -> list[Any]:
    """The factory's optional ``compile_devices()`` (SDK API 1.2), ``[]`` when absent or failing."""
    method = getattr(entry.factory, "compile_devices", None)
    if method is None:
        return []
    try:
        return list(method())
    except Exception:  # noqa: BLE001 - a broken optional hook means "none"
        return []


class InferenceSession:
    """Run an ONNX model, each node on the best provider that claims it.

    Arguments in onnxruntime's order: ``path_or_bytes`` (a path, bytes or
    ``onnx.ModelProto``), ``sess_options`` (:class:`SessionOptions`), ``providers`` (names or
    onnxruntime aliases such as ``CPUExecutionProvider``, or ``(name, options)`` pairs, in
    priority order; default: every available provider by priority), ``provider_options``
    (one dict per provider, or a dict keyed by provider). ``providers="auto:<policy>"`` (or
    ``sess_options``' selection policy, when no providers are given) lets a policy choose them
    (docs/DEVICES.md). cpu is appended as the fallback
    unless ``sess_options.disable_fallback``. docs/ORT_COMPAT.md lists every onnxruntime
    name and how epoxy answers it.
    """

    def __init__(
        self,
        path_or_bytes: ModelSource,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Any = None,
        *,
        registry: ProviderRegistry | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise TypeError(f"InferenceSession got unknown keyword argument(s) {sorted(unknown)}; it takes "
                            "path_or_bytes, sess_options, providers, provider_options (onnxruntime's order)")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise InvalidArgumentError(
                f"sess_options must be an epoxy.SessionOptions, got {type(sess_options).__name__}: the arguments are "
                "(path_or_bytes, sess_options, providers, provider_options) as in onnxruntime; pass providers=[...] "
                "by keyword")
        self._source = path_or_bytes
        self._options = sess_options or SessionOptions()
        if providers is None and self._options.has_providers():  # onnxruntime's SessionOptions.add_provider
            providers = self._options.added_providers()
        self._registry = registry or default_registry()
        self._fallback_on_failure = True  # onnxruntime's enable_fallback()/disable_fallback()
        with collector_paused():  # the build's objects all survive it: no full collections meanwhile
            if self._options.context_enable:  # onnxruntime's ep.context_enable: write the compiled model too
                self._build_and_write_context(providers, provider_options)
            else:
                self._build_through_cache(providers, provider_options)

    def __del__(self) -> None:
        # the onnx_ir model is cyclic: without this its weights wait for a full collection
        model = self.__dict__.get("_model")
        if model is not None:
            drop_constant_data(model)

    def _build_through_cache(self, providers: Sequence[Any] | None, provider_options: Any) -> None:
        """``_build``, from the session cache's prepared model when there is one, storing it
        there when there is not (:mod:`epoxy.aot.session_cache`; off unless configured)."""
        from .aot import session_cache

        folder = session_cache.cache_folder(self._options, self._source)
        if folder is None:
            self._build(providers, provider_options)
            return
        reason = (session_cache.ineligible_reason(self._source, self._options, providers)
                  or (None if _auto_policy(providers) is None else "a provider selection policy chooses the providers"))
        if reason is not None:
            self._build(providers, provider_options)
            self._report.notes.append(f"session cache not used: {reason}")
            return
        installed = {e.name: str(e.distribution_version or getattr(e.factory, "version", ""))
                     for e in self._registry.entries()}
        cache = session_cache.SessionCache(folder, self._source, self._options,
                                           _normalize_providers(providers, provider_options, self._registry),
                                           installed)
        entry, why = cache.lookup()
        if entry is not None:
            try:
                self._build(providers, provider_options, cached=entry)
                return
            except Exception as exc:  # noqa: BLE001 - the same model and options built before: the entry is at fault
                why = (f"session cache entry {entry.model_path} could not be used ({type(exc).__name__}: {exc}); "
                       "removed, the model is prepared again")
                cache.discard()
        self._store_in_cache(cache, providers, provider_options, why)

    def _store_in_cache(self, cache: Any, providers: Sequence[Any] | None, provider_options: Any,
                        why: str | None) -> None:
        """A fresh build, written to the session cache (a failure to write is a warning only)."""
        from .aot.capture import capturing
        from .aot.writer import write_compiled

        cache.stamp_sources()
        with capturing(compile_only=False) as capture:
            self._build(providers, provider_options)
        notes = self._report.notes
        if why:
            notes.append(why)
        if self._from_compiled_model:
            notes.append("session cache not used: the model is an epoxy compiled model already")
            self._release_kept_constants()
            return
        try:
            path = cache.store(lambda out: write_compiled(self, capture.groups, out), self._load_warnings,
                               self._prepared_notes, self.applied_passes)
        except Exception as exc:  # noqa: BLE001 - a full disk or a read-only folder must not fail the session
            note = (f"session cache: this model could not be stored ({type(exc).__name__}: {exc}); "
                    "the session is unaffected")
            warnings.warn(note, RuntimeWarning, stacklevel=4)
            notes.append(note)
            return
        finally:
            self._release_kept_constants()  # the model is written (or given up): the originals may go
        notes.append(f"prepared model stored in the session cache: {path}")

    def _build_and_write_context(self, providers: Sequence[Any] | None, provider_options: Any) -> None:
        """``_build`` recording what providers compile, then the compiled model written where
        ``ep.context_file_path`` says (default: beside the model, ``<name>_ctx.onnx``)."""
        from .aot.capture import capturing
        from .aot.writer import write_compiled

        target = self._options.context_file_path
        if not target:
            if not isinstance(self._source, (str, os.PathLike)):
                raise InvalidArgumentError("ep.context_enable=1 with a model given as bytes or a ModelProto: set "
                                           "ep.context_file_path to say where the compiled model goes")
            source = Path(self._source)
            target = str(source.with_name(source.stem + "_ctx.onnx"))
        if isinstance(self._source, (str, os.PathLike)) and Path(self._source).resolve() == Path(target).resolve():
            raise InvalidArgumentError(f"ep.context_file_path {target!r} would overwrite the model itself")
        with capturing() as capture:
            self._build(providers, provider_options)
        summary = write_compiled(self, capture.groups, target, embed=self._options.context_embed_mode)
        self._report.notes.append(f"compiled model written to {target} ({len(summary.groups)} compiled group(s))")
        self._release_kept_constants()

    def _build(self, providers: Sequence[Any] | None, provider_options: Any, cached: Any = None) -> None:
        """Everything from the model source to a runnable plan (again on ``set_providers``);
        from ``cached`` (a :class:`~epoxy.aot.session_cache.CachedEntry`) when given."""
        if cached is None and self._adopt_measured(providers):
            return
        model = self._source if cached is None else cached.model_path
        self.timings: dict[str, float] = {}
        self._profile_start_ns = time.time_ns()
        notes: list[str] = []
        unused = self._options.unused_config_keys()
        if unused:
            note = f"session config entries epoxy does not use (kept, no effect): {unused}"
            warnings.warn(note, RuntimeWarning, stacklevel=3)
            notes.append(note)
        t0 = time.perf_counter()
        limit = self._options.memory_limit_bytes
        reader = CompiledModelReader()
        passes, level = self._registry.passes(), self._options.optimization_level
        early = LoadTimePasses.of(passes, level)  # done on the protobuf first: the same graph, built faster
        loaded = load_model(model, check=self._options.check_model, infer_shapes=self._options.infer_shapes,
                            memory_limit=limit, prepare=None if cached else model_edits(self._options),
                            compiled=reader, trusted=cached is not None,
                            lift_constants=early.lift_constants is not None,
                            legacy_inputs=early.legacy_inputs is not None,
                            fold_fills=None if early.fold_fills is None else early.fold_fills[1],
                            drop_unread=early.drop_unread is not None)
        notes.extend(reader.notes)
        if limit is not None:
            check_static_values(loaded.model.graph, limit)
        load_warnings = loaded.warnings if cached is None else cached.warnings
        for note in load_warnings:
            warnings.warn(note, RuntimeWarning, stacklevel=3)
        self._load_warnings = list(load_warnings)
        self._from_compiled_model = reader.compiled and cached is None
        if cached is None:
            notes.extend(loaded.warnings)
        self._metadata = ModelMetadata.of(loaded.model)
        if cached is not None:  # the cache's compiled-model record is not the model's own metadata
            self._metadata.custom_metadata_map.pop(COMPILED_METADATA_KEY, None)
        t1 = time.perf_counter()
        capture = active_capture()  # epoxy compile's session: export what providers compile
        chosen = self._create_providers(providers, provider_options, notes,
                                        compile_only=capture is not None and capture.compile_only)
        ledger = ArtifactLedger()
        if reader.groups or capture is not None:
            versions = {name: str(getattr(getattr(self._registry.get(name), "factory", None), "version", ""))
                        for name, _ in chosen}
            chosen = wrap(chosen, reader.groups, versions, ledger, capture, RecordedPartition.of(reader.metadata))
        t_providers = time.perf_counter()  # provider creation is timed apart from the optimizer
        names = [name for name, _ in chosen]
        optimizer_notes_from = len(notes)
        inlined = inline_local_functions(loaded.model)
        if inlined:
            notes.append(f"inlined {inlined} call(s) of model-local functions")
        if cached is not None:  # prepared by an earlier session: say what that one said
            self.applied_passes = list(cached.applied_passes)
            notes.extend(cached.notes)
            notes.append(f"prepared from the session cache: {cached.model_path} (stored {cached.created}); loading "
                         "checks, shape inference and the optimizer ran when it was stored")
        elif reader.compiled:  # optimized (and typed) when it was compiled: the groups' nodes must stay as they are
            self.applied_passes = []
            notes.append("an epoxy compiled model: optimized when compiled, so the optimizer and shape inference "
                         "were skipped")
        else:
            applied = optimize(loaded.model, passes, level, names, notes)
            done = [name for name, count in (
                (early.lift_constants, loaded.lifted_constants), (early.legacy_inputs, loaded.legacy_inputs_dropped),
                (early.fold_fills and early.fold_fills[0], loaded.folded_fills),
                (early.drop_unread, loaded.dropped_initializers)) if name and count]
            self.applied_passes = with_work_done_while_loading(applied, done, passes)
        self._prepared_notes = [*loaded.warnings, *notes[optimizer_notes_from:]] if cached is None else []
        if self._options.optimized_model_filepath:
            save_optimized(loaded.model, self._options.optimized_model_filepath)
            notes.append(f"optimized model ({level}) written to {self._options.optimized_model_filepath}")
        t2 = time.perf_counter()
        if self._options.intra_op_num_threads:  # before kernels are built: some time themselves
            set_blas_threads(self._options.intra_op_num_threads)
        with memory_limit_scope(limit):  # kernels bind the limit for outputs sized at run time
            graph, parts, built, chosen, t3 = self._partition_and_plan(loaded, chosen, notes)
        names = [name for name, _ in chosen]
        if limit is not None:
            check_planned_peak(built.memory.planned_peak_bytes, limit)
        if not self._options.plans_buffers:  # onnxruntime's arena / memory pattern switched off
            built.plan.arena = None
            notes.append("planned output buffers off (enable_cpu_mem_arena / enable_mem_pattern / enable_mem_reuse)")
        t4 = time.perf_counter()
        self.timings = {"load": t1 - t0, "providers": t_providers - t1, "optimize": t2 - t_providers,
                        "partition": t3 - t2, "plan": t4 - t3}
        self._graph = graph
        self._model = loaded.model
        self._partition = parts
        self._providers = chosen
        for name, provider in chosen:
            if isinstance(provider, AotProvider):
                for label in provider.unplaced():
                    ledger.not_used(label, "not used: its nodes went to a provider listed before "
                                           f"{name!r}, or are not in the loaded graph")
        self._plan = built.plan
        self._every_output = [built.plan.output_slots[n] for n in graph.outputs]  # a run's default fetch
        self._memory = built.memory
        self._check_outputs = checks_requested(self._options.check_outputs)
        self._profiler: Profiler | None = (
            Profiler(origin=t0, session_phases=self.timings) if self._options.enable_profiling else None)
        self._executor = self._make_executor(built.plan)
        self._report = PartitionReport(
            providers=names,
            nodes=parts.decisions,
            groups={u.label: [graph.nodes[i].name for i in u.nodes] for u in parts.units if u.fused},
            notes=notes,
            artifacts=dict(ledger.status),
            selection=self._selection.to_dict() if self._selection is not None else None,
        )
        constants = graph.constants()
        self._inputs = [n for n in graph.inputs if n not in constants]
        self._overridable = [n for n in graph.inputs if n in constants]
        self._input_types = {n: graph.value_type(n) for n in graph.inputs}
        self._exact_feeds = ExactFeeds(self._input_types, set(self._inputs))
        # where each feed goes: graph inputs, or the host slot of an overridden initializer
        self._feed_slots = {**{n: built.plan.slot_names.index(n) for n in self._overridable
                               if n in built.plan.slot_names}, **built.plan.input_slots}
        self._device_io = _device_io(built.plan, self._feed_slots, chosen, _weakly(self._make_executor))
        self._constant_owners = owners_of(built.plan.initial)
        self._declared_dtypes = {n: vt.dtype for n in graph.outputs
                                 if (vt := graph.value_type(n)).kind == "tensor" and vt.dtype is not None}
        self._dtype_warned: set[str] = set()
        log = self._log = session_logger(self._options.logid, self._options.log_severity_level)
        # onnxruntime's VLOG: verbose severity plus a verbosity level logs every run
        self._log_runs = self._options.log_severity_level == 0 and self._options.log_verbosity_level > 0
        for note in notes:
            log.info(note)
        log.debug("session created: %s", ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items()))
        self._released_constants: list[str] = []
        if capture is None:  # else the compiled model is written from the model afterwards
            self._release_kept_constants()

    def _release_kept_constants(self) -> None:
        """Drop the constants whose readers all keep their own copies (prepacked weights:
        ``epoxy.plan.released_constants``), once nothing will write the model out."""
        released = release_constants(self._plan, self._graph)
        if released:
            self._released_constants.extend(released)
            self._constant_owners = owners_of(self._plan.initial)  # a freed array's id may be reused
            self._report.notes.append(f"{len(released)} constant(s) held only by the kernels that prepacked them "
                                      "(the originals dropped)")

    # -- construction helpers ------------------------------------------------------------
    def _partition_and_plan(self, loaded: Any, chosen: list[tuple[str, Provider]], notes: list[str]) -> Any:
        """Partition and plan (``epoxy.plan.compile_graph``, the path control-flow bodies
        take too). A provider whose capability(), kernel() or compile() fails is skipped for
        this session, the reason in the report notes (an error in strict mode,
        ``EPOXY_STRICT_PLUGINS=1``); the fallback's failures are always errors."""
        names = [name for name, _ in chosen]
        fallback = FALLBACK_PROVIDER if FALLBACK_PROVIDER in names and not self._no_fallback else None
        options = self._options

        def control_flow(providers: list[tuple[str, Provider]]) -> tuple[str, Provider]:
            # the core's control-flow provider comes first; it compiles subgraphs over `providers`
            core = ControlFlowProvider(providers, fallback)
            core.memory_limit, core.max_loop_iterations = options.memory_limit_bytes, options.max_loop_iterations
            return core.name, core

        def skipped(exc: ProviderError) -> None:
            note = f"provider {exc.provider!r} skipped for this session: {exc}"
            warnings.warn(note, RuntimeWarning, stacklevel=4)
            notes.append(note)

        partitioned: list[float] = []
        planned = partition_and_plan(
            loaded.model.graph, loaded.model.opset_imports, chosen, fallback, core=control_flow, on_skip=skipped,
            on_expand=(lambda: reinfer_shapes(loaded.model)) if options.infer_shapes else None, notes=notes,
            fold_constants=options.optimization_level != "disable",
            on_partitioned=lambda: partitioned.append(time.perf_counter()))
        # control_flow above built it: a ControlFlowProvider, never None
        notes.extend(cast(ControlFlowProvider, planned.core).summaries())
        if planned.built.folded:
            notes.append(f"constant-folded {len(planned.built.folded)} node(s) at session creation")
        return planned.graph, planned.partition, planned.built, planned.providers, partitioned[-1]

    def _make_executor(self, plan: Any) -> Any:
        """The executor for ``plan`` (the session's, or a device-I/O variant of it): output
        checks and profiling wrap its steps, so they hold under either execution mode."""
        if self._check_outputs:
            plan = with_output_checks(plan, self._graph.value_type)
        if self._profiler is not None:  # every step is timed on every run: no shape cache
            return ProfilingExecutor(plan, self._profiler, self._plain_executor)
        if self._options.shape_cache and not self._options.parallel:
            cached = shape_caching_executor(plan, self._graph)
            if cached is not None:
                return cached
        return self._plain_executor(plan)

    def _plain_executor(self, plan: Any) -> Any:
        if self._options.parallel:
            return ParallelExecutor(plan, self._options.inter_op_num_threads or 2)
        return SequentialExecutor(plan)

    def _create_providers(self, providers: Any, provider_options: Any, notes: list[str],
                          compile_only: bool = False) -> list[tuple[str, Provider]]:
        """The providers asked for, created on their devices; with ``compile_only`` (``epoxy
        compile``) a provider with no device here may use a compile device of its factory."""
        explicit = providers is not None and _auto_policy(providers) is None
        providers, provider_options = self._apply_policy(providers, provider_options, notes)
        pairs = _normalize_providers(providers, provider_options, self._registry)
        if not explicit:  # say why installed providers are not in the default list
            notes.extend(f"provider {e.name!r} unavailable: {e.unavailable_reason}"
                         for e in self._registry.entries() if not e.available)
        if (not self._no_fallback
                and FALLBACK_PROVIDER not in [self._registry.canonical_name(n) for n, _ in pairs]
                and self._registry.get(FALLBACK_PROVIDER) is not None):
            pairs.append((FALLBACK_PROVIDER, {}))
        created: list[tuple[str, Provider]] = []
        self._spelled: dict[str, str] = {}
        self._provider_options = {name: dict(options) for name, options in pairs}
        spelled: dict[str, str] = {}  # provider name -> how the user named it (its name or an alias)
        for name, options in pairs:
            entry = self._registry.resolve(name)
            if entry is None and name.endswith("ExecutionProvider"):
                # onnxruntime code lists providers a build may lack (CUDA, TensorRT...): like
                # onnxruntime, warn and go on with the others, saying which package would add it
                package = ORT_PROVIDER_PACKAGES.get(name)
                hint = f"install {package}" if package else "no epoxy provider package declares this name"
                note = (f"provider {name!r} is not installed ({hint}); skipped, as onnxruntime skips providers "
                        f"its build lacks; installed: {self._registry.describe_names()}")
                warnings.warn(note, RuntimeWarning, stacklevel=4)
                notes.append(note)
                continue
            if entry is None:
                failed = [f for f in self._registry.failures if f.plugin == name]
                why = f" (plugin failed: {failed[0].reason})" if failed else ""
                raise InvalidArgumentError(
                    f"unknown provider {name!r}{why}; installed: {self._registry.describe_names()}"
                )
            if entry.name in spelled:
                raise InvalidArgumentError(
                    f"provider {entry.name!r} listed twice, as {spelled[entry.name]!r} and as {name!r}"
                )
            spelled[entry.name] = name
            self._spelled[entry.name] = name
            compile_devices = _compile_devices(entry) if compile_only and not entry.available else []
            if not entry.available and not compile_devices:
                note = f"provider {name!r} skipped: {entry.unavailable_reason}"
                warnings.warn(note, RuntimeWarning, stacklevel=3)
                notes.append(note)
                continue
            if compile_devices:
                notes.append(f"provider {name!r} compiles for {compile_devices[0].label} (it cannot run here: "
                             f"{entry.unavailable_reason})")
            device = compile_devices[0] if compile_devices else _select_device(entry, options)
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
                if explicit or name == FALLBACK_PROVIDER or strict_mode():
                    raise error from exc
                note = f"provider {name!r} skipped: {error}"
                warnings.warn(note, RuntimeWarning, stacklevel=3)
                notes.append(note)
                continue
            created.append((entry.name, provider))
        if not created:
            raise InvalidArgumentError("no usable provider: " + ("; ".join(notes) or "none requested"))
        return created

    def _apply_policy(self, providers: Any, provider_options: Any, notes: list[str]) -> tuple[Any, Any]:
        """The provider list a selection policy chooses (``providers="auto:<policy>"``, else
        the options' policy or delegate when no providers are given); otherwise unchanged.
        The choice is kept for ``get_providers().selection`` and the partition report."""
        from .devices.selection import select_providers

        self._selection = None
        spec = _auto_policy(providers)
        if spec is None:
            configured = self._options.selection_policy()
            if configured is None:
                return providers, provider_options
            if providers is not None:
                note = ("SessionOptions has a provider selection policy but providers were given: the given providers "
                        "are used (as onnxruntime does)")
                warnings.warn(note, RuntimeWarning, stacklevel=4)
                notes.append(note)
                return providers, provider_options
            spec = configured
        if provider_options is not None and not isinstance(provider_options, Mapping):
            raise InvalidArgumentError("with a selection policy, give provider_options as a dict keyed by provider "
                                       "(the policy decides the list and its order)")
        meta = self._metadata
        model_metadata = {"producer_name": meta.producer_name, "graph_name": meta.graph_name,
                          "graph_description": meta.graph_description, "domain": meta.domain,
                          "doc_string": meta.description, "model_version": str(meta.version)}
        selection = select_providers(spec, self._registry, model_metadata, measure=self._measure)
        self._selection = selection
        chosen = selection.providers()
        if provider_options:
            names = {self._registry.canonical_name(name) for name, _ in chosen}
            unused = [key for key in provider_options if self._registry.canonical_name(key) not in names]
            if unused:
                notes.append(f"provider_options for {unused} unused: the policy did not choose them")
            given = {self._registry.canonical_name(key): dict(opts) for key, opts in provider_options.items()}
            chosen = [(name, {**given.get(name, {}), **opts}) for name, opts in chosen]
        return chosen, None

    def _adopt_measured(self, providers: Any) -> bool:
        """``max_performance`` that measures now: take over the winning candidate's session
        (built from this model with these options) instead of creating its providers a second
        time. Not when the options write files the candidates skip (profile, optimized or
        compiled model): then the chosen providers are created as usual."""
        from .devices.inventory import get_ep_devices
        from .devices.policies import MEASURED, policy_name

        self._pending_selection: Any = None
        spec = _auto_policy(providers)
        if spec is None and providers is None:
            spec = self._options.selection_policy()
        if spec is None or (callable(spec) and not isinstance(spec, str)) or policy_name(spec) != MEASURED:
            return False
        options = self._options
        if (options.enable_profiling or options.optimized_model_filepath or options.context_enable
                or active_capture() is not None):
            return False
        started = time.perf_counter()
        selection = self._measure(get_ep_devices(self._registry))
        winner, selection.session = selection.session, None
        if winner is None:  # a cached decision, or the fallback: the chosen providers are created as usual
            self._pending_selection = selection
            return False
        self.__dict__.update({k: v for k, v in vars(winner).items() if k not in _OWN_STATE})
        winner.__dict__.clear()  # an empty shell: its __del__ must not drop the model this session now holds
        # the device-I/O router called back into the winner: it calls this session now
        self._device_io = _device_io(self._plan, self._feed_slots, self._providers, _weakly(self._make_executor))
        self._selection = selection
        self._report.selection = selection.to_dict()
        self._report.notes.append("this session is the winning candidate's, taken over from the measurement")
        self.timings = {**self.timings, "select": time.perf_counter() - started}
        return True

    def _measure(self, ep_devices: Any) -> Any:
        """``max_performance`` for this session's model: cached, else measured (``epoxy.devices.tuning``).
        A model the cpu reference cannot run on the tuning inputs falls back to ``default``, warned."""
        from .devices.selection import select_providers
        from .devices.tuning import TuningError, tuned_selection

        pending, self._pending_selection = getattr(self, "_pending_selection", None), None
        if pending is not None:
            return pending
        dims = dict(getattr(self._options, "_dim_overrides", {}).get("name", {}))
        try:
            return tuned_selection(self._source, self._options, self._registry, ep_devices, InferenceSession,
                                   dims=dims)
        except TuningError as exc:
            note = f"{exc}; the default policy is used instead"
            warnings.warn(note, RuntimeWarning, stacklevel=5)
            fallback = select_providers("default", self._registry, {})
            fallback.notes.insert(0, note)
            return fallback

    def provider_selection(self) -> Any:
        """The :class:`epoxy.devices.ProviderSelection` that chose this session's providers, or
        ``None`` when they were named."""
        return self._selection

    @property
    def _no_fallback(self) -> bool:
        return self._options.disable_fallback or not self._fallback_on_failure

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
        """Providers in use, in priority order, in the names the user asked with (an alias
        such as ``CPUExecutionProvider`` when that is how it was requested); ``in`` also
        knows the aliases (``"CPUExecutionProvider" in session.get_providers()``)."""
        from .api.provider_names import ProviderNames

        names = ProviderNames([self._spelled.get(name, name) for name, _ in self._providers],
                              self._registry.aliases())
        names.selection = self._selection
        return names

    def get_provider(self, name: str) -> Provider:
        """The provider object this session created for ``name`` (or its alias): what a
        device binding (e.g. ep-cuda's IOBinding) needs to convert values with its allocator."""
        entry = self._registry.resolve(name)
        canonical = entry.name if entry is not None else name
        for provider_name, provider in self._providers:
            if provider_name == canonical:
                return provider
        raise InvalidArgumentError(f"provider {name!r} is not used by this session; it uses {self.get_providers()}")

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Options of each provider in use, keyed by the name the user asked with, values as
        strings (as onnxruntime returns them)."""
        return {self._spelled.get(name, name): {k: str(v) for k, v in self._provider_options.get(name, {}).items()}
                for name, _ in self._providers}

    def get_session_options(self) -> SessionOptions:
        """The options this session was created with."""
        return self._options

    def get_modelmeta(self) -> ModelMetadata:
        """The model's producer, graph name and description, domain, version, metadata map."""
        return self._metadata

    def set_providers(self, providers: Sequence[Any] | None = None, provider_options: Any = None) -> None:
        """Rebuild the session on other providers (same model and options), as onnxruntime
        does; the model is loaded, optimized and partitioned again."""
        if providers is None:
            raise InvalidArgumentError("set_providers needs a list of providers, e.g. ['cpu']")
        with collector_paused():
            self._build(providers, provider_options)

    def disable_fallback(self) -> None:
        """From the next :meth:`set_providers` on, cpu is not appended as the fallback: a node
        no listed provider claims is an error naming it (onnxruntime: no retry on cpu)."""
        self._fallback_on_failure = False

    def enable_fallback(self) -> None:
        """Undo :meth:`disable_fallback` (takes effect at the next :meth:`set_providers`)."""
        self._fallback_on_failure = True

    def io_placement(self) -> IOPlacement:
        """Where each graph input is read and each output produced: device keys, device
        slots, copy steps (see :mod:`epoxy.plan.placement`)."""
        return self._plan.io

    def get_devices(self) -> dict[str, str]:
        """Names ``run_options={"output_device": ...}`` accepts -> device key (provider
        names, device labels, ``"host"``)."""
        return dict(self._device_io.devices)

    def partition_report(self) -> PartitionReport:
        """For every node: the provider chosen, its fused group, why earlier providers declined."""
        return self._report

    def memory_plan(self) -> dict[str, Any]:
        """Planned memory per device (buffers reused by liveness) and constant bytes."""
        return self._memory.summary()

    @property
    def planned_peak_bytes(self) -> int:
        return self._memory.planned_peak_bytes

    def end_profiling(self, path: str | None = None) -> str:
        """Write the profiled runs as onnxruntime writes its profile (a JSON list of trace
        events that chrome://tracing and Perfetto open); returns the file name. Profiling
        stops; with profiling off it returns ``""``, as onnxruntime does."""
        if self._profiler is None:
            return ""
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        written = self._profiler.write(path or f"{self._options.profile_file_prefix}_{stamp}.json",
                                       self._spelled)
        self._profiler = None
        self._executor = self._make_executor(self._plan)
        return written

    def get_profiling_start_time_ns(self) -> int:
        """When this session's profiling clock started (``time.time_ns()``, as onnxruntime)."""
        return self._profile_start_ns

    def profile_summary(self, limit: int = 15) -> list[dict[str, Any]]:
        """Time per op type over the profiled runs, largest first."""
        if self._profiler is None:
            raise InvalidArgumentError("profiling is off (or ended): create the session with "
                                       "SessionOptions(enable_profiling=True)")
        return self._profiler.top_ops(limit)

    def _node_arg(self, name: str) -> NodeArg:
        vt = self._graph.value_type(name)
        return NodeArg(name, _type_string(vt), _ort_shape(vt), vt)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | Mapping[str, Any] | None = None) -> list[Any]:
        """Run the model; returns the requested outputs (all when ``output_names`` is None or
        empty, as in onnxruntime).

        Feeds are numpy arrays, Python lists and scalars (converted to the input's declared
        dtype), strings as ``str``/``bytes``/object arrays, sequences as lists, or device
        values a provider's allocator ``accepts`` (placed in that device's slot without the
        upload copy). An input returned as an output is returned as a copy, never the
        caller's buffer. ``run_options``: an :class:`epoxy.RunOptions` (``terminate`` stops
        the run from another thread) or a dict; ``{"output_device": "cuda"}`` (or
        ``{output name: device}``) returns outputs produced on that device as device values,
        without the download copy.
        """
        stop, options = self._run_controls(run_options)
        if not self._log_runs:
            return self._run(output_names, input_feed, stop, options)
        start = time.perf_counter()
        results = self._run(output_names, input_feed, stop, options)
        self._log.debug("run of %s took %.3f ms", list(output_names or self._graph.outputs),
                        (time.perf_counter() - start) * 1e3)
        return results

    def _run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], stop: Any,
             run_options: Mapping[str, Any] | None) -> list[Any]:
        """``run`` after the run options are split into the stop flag and the dict options
        (IOBinding adds per-output devices to the latter)."""
        io = self._device_io
        on_device = None
        feeds = None if io.accepting else self._exact_feeds.check(input_feed)
        if feeds is None:  # anything but plain arrays of the declared dtypes and ranks
            if isinstance(input_feed, Mapping) and any(isinstance(v, OrtValue) for v in input_feed.values()):
                devices = session_devices(self)
                input_feed = {name: feed_value(value, devices) for name, value in input_feed.items()}
            on_device = io.device_feeds(input_feed) if io.accepting else None
            feeds = check_feeds(input_feed, self._input_types, set(self._inputs), on_device)
        if self._options.memory_limit_bytes is not None:
            check_feed_sizes(feeds, self._options.memory_limit_bytes)
        outputs = self._plan.output_slots
        if not output_names:  # None or [] (onnxruntime: every output)
            names: Sequence[str] = self._graph.outputs
            fetch = self._every_output
        else:
            if isinstance(output_names, str):
                raise InvalidArgumentError("output_names must be a list of names, not a string")
            names, fetch = output_names, []
            for name in output_names:
                if name not in outputs:
                    raise InvalidArgumentError(
                        f"unknown output {name!r}; the model's outputs are {self._graph.outputs}"
                    )
                fetch.append(outputs[name])
        fetch_on_device = io.output_devices(names, run_options) if run_options else None
        if on_device or fetch_on_device:
            results = io.run(feeds, on_device or {}, names, fetch_on_device or {}, stop)
        else:
            slots = self._feed_slots
            results = self._executor.run([(slots[n], v) for n, v in feeds.items()], fetch, stop)
        results = detach_aliases(results, feeds.values(), self._constant_owners)
        if self._declared_dtypes:
            self._warn_on_undeclared_dtypes(names, results)
        return results

    def _warn_on_undeclared_dtypes(self, names: Sequence[str], results: Sequence[Any]) -> None:
        """A graph output whose kernel returns another dtype than the model declares (and
        ``get_outputs()`` reports) is a silent difference for the caller: say so, once per output."""
        for name, value in zip(names, results):
            want = self._declared_dtypes.get(name)
            got = getattr(value, "dtype", None)
            if want is None or got is None or got == want or name in self._dtype_warned:
                continue
            self._dtype_warned.add(name)
            note = (f"output {name!r} is declared {describe_dtype(want)} (get_outputs() says so) but its node "
                    f"returned {describe_dtype(got)}; the values are returned as computed")
            self._report.notes.append(note)
            warnings.warn(note, RuntimeWarning, stacklevel=3)

    def _run_controls(self, run_options: Any) -> tuple[Any, Mapping[str, Any] | None]:
        """(stop condition, dict run options) from a RunOptions object, a dict or None. The
        stop condition is the terminate flag, bounded in time by the run's
        ``epoxy.run_timeout_s``, else the session's ``run_timeout_s`` (``epoxy.run.run_bound``)."""
        default = self._options.run_timeout_s
        if not isinstance(run_options, RunOptions):  # None or a dict
            return run_stop(None, default, "SessionOptions.run_timeout_s"), run_options
        unused = run_options.unused_config_keys()
        if unused:
            warnings.warn(f"run config entries epoxy does not use (no effect): {unused}", RuntimeWarning,
                          stacklevel=3)
        if run_options.log_severity_level != -1 or run_options.run_tag:
            session_logger(run_options.logid or self._options.logid,
                           run_options.log_severity_level).debug("run %r", run_options.run_tag)
        if run_options.terminate:
            raise RunTerminatedError("run terminated before it started: RunOptions.terminate is set "
                                     "(set it to False to reuse these options)")
        own = run_options.run_timeout_s
        stop = (run_stop(run_options._stop, default, "SessionOptions.run_timeout_s") if own is None
                else run_stop(run_options._stop, own, "the run config entry"))
        return stop, run_options.as_dict()

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[Any, Any, str], None], user_data: Any = None,
                  run_options: RunOptions | Mapping[str, Any] | None = None) -> None:
        """Run on a worker thread and call ``callback(outputs, user_data, error)`` when done:
        ``outputs`` the list ``run`` returns (``[]`` on failure), ``error`` ``""`` or the
        error's message, as onnxruntime does. Returns at once."""
        if not callable(callback):
            raise InvalidArgumentError(f"run_async: callback must be callable, got {type(callback).__name__}")
        feeds = dict(input_feed) if isinstance(input_feed, Mapping) else input_feed

        def work() -> None:
            try:
                results = self.run(output_names, feeds, run_options)
            except Exception as exc:  # noqa: BLE001 - reported to the callback, as onnxruntime does
                callback([], user_data, f"{type(exc).__name__}: {exc}")
                return
            callback(results, user_data, "")

        _async_pool().submit(work)


    # -- values and bindings (epoxy.api.ort_value / epoxy.api.io_binding) ---------------------------
    def io_binding(self) -> Any:
        """An :class:`epoxy.IOBinding` over this session (onnxruntime's ``io_binding()``)."""
        from .api.io_binding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        """Run with the inputs and outputs bound in ``iobinding`` (results stay in it)."""
        from .api.io_binding import run_with_iobinding

        run_with_iobinding(self, iobinding, run_options)

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                            run_options: Any = None) -> list[Any]:
        """``run`` with :class:`epoxy.OrtValue` feeds; returns ``OrtValue`` outputs."""
        from .api.ort_value import run_with_ort_values

        return run_with_ort_values(self, output_names, input_dict_ort_values, run_options)


def _ort_shape(vt: ValueType) -> list[int | str | None]:
    """Dims as onnxruntime lists them: ``[]`` for non-tensors and unknown rank, ``None`` for
    a dim with no size or name (onnx's inference invents ``unk__N`` names for those)."""
    if vt.kind != "tensor" or vt.shape is None:
        return []
    return [None if isinstance(d, str) and d.startswith("unk__") else d for d in vt.shape]


def _weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` without a reference to its object: a helper the session holds keeps it
    out of a reference cycle, so dropping the last reference frees the session and its
    weights at once instead of at the garbage collector's next full pass."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        if bound is None:
            raise ReferenceError("the session this belonged to is gone")
        return bound(*args)

    return call


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


_async_lock = threading.Lock()
_async_executor: ThreadPoolExecutor | None = None


def _async_pool() -> ThreadPoolExecutor:
    """The worker threads ``run_async`` runs on (shared by all sessions, created on first use)."""
    global _async_executor
    with _async_lock:
        if _async_executor is None:
            _async_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="epoxy-run-async")
        return _async_executor
