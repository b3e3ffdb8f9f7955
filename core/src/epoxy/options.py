"""Session and run options, with onnxruntime's names, enums and semantics.

Code written for onnxruntime sets ``SessionOptions`` attributes one by one; epoxy takes the
same attributes (and keyword arguments to the constructor). Every attribute is checked when
it is set, an attribute that does not exist raises ``AttributeError`` listing the known
ones, and knobs epoxy has no use for warn instead of doing nothing silently.
"""

from __future__ import annotations

import enum
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import InvalidArgumentError
from .run.run_bound import TIMEOUT_KEY, timeout_seconds


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimization levels; each maps to one of epoxy's pass levels."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3  # epoxy has no layout-only passes: runs what "extended" runs
    ORT_ENABLE_ALL = 99

    __str__ = enum.Enum.__str__  # "GraphOptimizationLevel.ORT_ENABLE_ALL", as onnxruntime prints
    __format__ = enum.Enum.__format__

    @property
    def epoxy_level(self) -> str:
        """epoxy's name of this level (``disable``, ``basic``, ``extended``, ``all``)."""
        return _LEVEL_NAMES[self]


class ExecutionMode(enum.IntEnum):
    """Steps one after another, or independent steps on a thread pool."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__


class ExecutionOrder(enum.IntEnum):
    """onnxruntime's node orderings; epoxy runs its planned (topological) order only."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2

    __str__ = enum.Enum.__str__
    __format__ = enum.Enum.__format__


_LEVEL_NAMES = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: "disable",
    GraphOptimizationLevel.ORT_ENABLE_BASIC: "basic",
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: "extended",
    GraphOptimizationLevel.ORT_ENABLE_LAYOUT: "extended",
    GraphOptimizationLevel.ORT_ENABLE_ALL: "all",
}
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
_LEVEL_BY_NAME = {"disable": GraphOptimizationLevel.ORT_DISABLE_ALL, "basic": GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  "extended": GraphOptimizationLevel.ORT_ENABLE_EXTENDED, "all": GraphOptimizationLevel.ORT_ENABLE_ALL}
EXECUTION_MODES = ("sequential", "parallel")
CHECK_MODES = ("warn", "strict", "off")

#: Provider options the core takes itself, for every provider, before ``create`` sees them.
CORE_PROVIDER_OPTIONS: dict[str, str] = {
    "device_index": "which of the provider's devices to use, int (default 0, the first one "
                    "`epoxy providers` lists)",
    "device_id": "onnxruntime's name for device_index (an int or a digit string)",
}


# -- attribute normalizers: value in, canonical value out, or a clear error -----------------
def _enum_or_name(enum_type: type[enum.IntEnum], names: Mapping[str, enum.IntEnum]) -> Callable[[str, Any], Any]:
    def normalize(field: str, value: Any) -> Any:
        if isinstance(value, enum.Enum) and not isinstance(value, enum_type):
            raise InvalidArgumentError(f"{field} must be a {enum_type.__name__}, got {value!r}")
        if isinstance(value, str):
            if value in names:
                return names[value]
            if value in enum_type.__members__:
                return enum_type[value]
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return enum_type(value)
            except ValueError:
                pass
        choices = [*names, *enum_type.__members__]
        raise InvalidArgumentError(f"{field} must be one of {choices} (or {enum_type.__name__}), got {value!r}")

    return normalize


def _count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{field} must be an int >= 0, got {value!r}")
    return value


def _flag(field: str, value: Any) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise InvalidArgumentError(f"{field} must be True or False, got {value!r}")
    return bool(value)


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{field} must be a str, got {type(value).__name__}")
    return value


def _severity(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= 4:
        raise InvalidArgumentError(f"{field} must be an int from -1 (default) to 4 (fatal), got {value!r}")
    return value


def _positive_or_none(field: str, value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise InvalidArgumentError(f"{field} must be a positive int or None, got {value!r}")
    return value


def check_mode(value: bool | str, field: str = "check_model") -> str:
    """A model-check setting as one of :data:`CHECK_MODES` (True -> strict, False -> off);
    the loader's ``check=`` argument takes the same values."""
    if value is True:
        return "strict"
    if value is False:
        return "off"
    if value not in CHECK_MODES:
        raise InvalidArgumentError(f"{field} must be one of {CHECK_MODES} (or True=strict / False=off), got {value!r}")
    return str(value)


def _check_mode(field: str, value: Any) -> str:
    return check_mode(value, field)


def _execution_order(field: str, value: Any) -> ExecutionOrder:
    order = _enum_or_name(ExecutionOrder, {"default": ExecutionOrder.DEFAULT})(field, value)
    if order != ExecutionOrder.DEFAULT:
        raise InvalidArgumentError(
            f"{field}={order.name} is not offered: epoxy runs nodes in its planned topological order "
            "(memory is planned by liveness); use ExecutionOrder.DEFAULT")
    return order


def _no_effect(reason: str) -> Callable[[str, Any], Any]:
    """A knob epoxy accepts for onnxruntime code but cannot honour: setting it to anything
    but its default warns with ``reason`` (no silent no-ops)."""

    def normalize(field: str, value: Any) -> Any:
        return _flag(field, value)

    normalize.reason = reason  # type: ignore[attr-defined]
    return normalize


def _policy(field: str, value: Any) -> str | None:
    """A selection policy's name (checked against the registered policies when a session is
    created: plugins add policies); onnxruntime's or epoxy's ``OrtExecutionProviderDevicePolicy``
    members are taken by name."""
    if value is None:
        return None
    if callable(value) and not isinstance(value, (str, enum.Enum)):
        raise InvalidArgumentError(f"{field} takes a policy name; a callable goes to "
                                   "set_provider_selection_policy_delegate(fn)")
    from .devices.policies import policy_name

    name = policy_name(value)
    if not name:
        raise InvalidArgumentError(f"{field} must be a policy name such as 'prefer_gpu', got {value!r}")
    return name


def _budget(field: str, value: Any) -> float:
    seconds = timeout_seconds(field, value)
    if seconds is None:
        raise InvalidArgumentError(f"{field} must be a positive number of seconds, got {value!r}")
    return seconds


#: attribute -> (default, normalizer). Order is the order ``repr`` shows.
_FIELDS: dict[str, tuple[Any, Callable[[str, Any], Any]]] = {
    "graph_optimization_level": (GraphOptimizationLevel.ORT_ENABLE_ALL,
                                 _enum_or_name(GraphOptimizationLevel, _LEVEL_BY_NAME)),
    "execution_mode": (ExecutionMode.ORT_SEQUENTIAL, _enum_or_name(
        ExecutionMode, {"sequential": ExecutionMode.ORT_SEQUENTIAL, "parallel": ExecutionMode.ORT_PARALLEL})),
    "execution_order": (ExecutionOrder.DEFAULT, _execution_order),
    "intra_op_num_threads": (0, _count),
    "inter_op_num_threads": (0, _count),
    "enable_profiling": (False, _flag),
    "profile_file_prefix": ("epoxy_profile", _text),
    "optimized_model_filepath": ("", _text),
    "log_severity_level": (-1, _severity),
    "log_verbosity_level": (0, _count),
    "logid": ("", _text),
    "enable_cpu_mem_arena": (True, _flag),
    "enable_mem_pattern": (True, _flag),
    "enable_mem_reuse": (True, _flag),
    "use_deterministic_compute": (False, _flag),
    "use_per_session_threads": (True, _no_effect(
        "numpy's BLAS thread pool is process-wide: intra_op_num_threads sets it for the whole process")),
    # epoxy's own
    "disable_fallback": (False, _flag),
    "check_model": ("warn", _check_mode),
    "infer_shapes": (True, _flag),
    "memory_limit_bytes": (None, _positive_or_none),
    "max_loop_iterations": (None, _positive_or_none),
    "check_outputs": (False, _flag),
    "run_timeout_s": (None, timeout_seconds),
    "shape_cache": (True, _flag),
    "provider_selection_policy": (None, _policy),
    "tune_budget_s": (30.0, _budget),
    # onnxruntime's EPContext session config entries (the ep.context_* keys below)
    "context_enable": (False, _flag),
    "context_file_path": ("", _text),
    "context_embed_mode": (True, _flag),
    "session_cache_dir": ("", _text),
}

#: ``add_session_config_entry`` keys that take effect: key -> (attribute, value parser)
_CONFIG_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "session.disable_cpu_ep_fallback": ("disable_fallback", lambda v: v.strip() == "1"),
    "session.strict_shape_type_inference": ("check_model", lambda v: "strict" if v.strip() == "1" else "warn"),
    "session.use_deterministic_compute": ("use_deterministic_compute", lambda v: v.strip() == "1"),
    "epoxy.check_model": ("check_model", str.strip),
    "epoxy.memory_limit_bytes": ("memory_limit_bytes", lambda v: int(v) if v.strip() else None),
    "epoxy.max_loop_iterations": ("max_loop_iterations", lambda v: int(v) if v.strip() else None),
    "epoxy.check_outputs": ("check_outputs", lambda v: v.strip().lower() in ("1", "true")),
    "epoxy.shape_cache": ("shape_cache", lambda v: v.strip().lower() in ("1", "true")),
    "ep.context_enable": ("context_enable", lambda v: v.strip() == "1"),
    "ep.context_file_path": ("context_file_path", str),
    "ep.context_embed_mode": ("context_embed_mode", lambda v: v.strip() != "0"),
    TIMEOUT_KEY: ("run_timeout_s", lambda v: timeout_seconds(TIMEOUT_KEY, v)),
    "epoxy.provider_selection_policy": ("provider_selection_policy", lambda v: v.strip() or None),
    "epoxy.tune_budget_s": ("tune_budget_s", lambda v: float(v)),
    "epoxy.session_cache_dir": ("session_cache_dir", str.strip),
}
#: keys with a fixed meaning epoxy can only honour at one value (else an error says why)
_CONFIG_FIXED: dict[str, tuple[str, str]] = {
    "session.load_model_format": ("ONNX", "epoxy reads ONNX models only (no .ort format)"),
    "session.save_model_format": ("ONNX", "optimized_model_filepath is written as ONNX only"),
}


class SessionOptions:
    """Options for :class:`epoxy.InferenceSession` (onnxruntime's ``SessionOptions``).

    onnxruntime's attributes: ``graph_optimization_level`` (a :class:`GraphOptimizationLevel`
    or epoxy's ``disable``/``basic``/``extended``/``all``; default ``ORT_ENABLE_ALL``, the
    fastest level, as in onnxruntime), ``execution_mode`` (:class:`ExecutionMode` or
    ``sequential``/``parallel``: independent steps on ``inter_op_num_threads`` workers, default
    2), ``intra_op_num_threads`` (BLAS threads; numpy's pool is process-wide, so this sets it
    for the process), ``enable_profiling`` / ``profile_file_prefix``, ``optimized_model_filepath``
    (the optimized graph is written there as ONNX), ``log_severity_level`` /
    ``log_verbosity_level`` / ``logid`` (epoxy's ``logging`` logger ``epoxy``),
    ``enable_cpu_mem_arena`` / ``enable_mem_pattern`` / ``enable_mem_reuse`` (any False: no
    planned, reused output buffers; every kernel allocates its outputs),
    ``use_deterministic_compute`` (epoxy's kernels are deterministic for a given provider and
    options; recorded), ``execution_order`` (``DEFAULT`` only).

    epoxy's own: ``disable_fallback`` (cpu is not appended; a node no listed provider claims
    is an error naming it), ``check_model`` (``warn``: onnx.checker complaints that are safe
    to run become warnings, as onnxruntime loads such models; ``strict``: they are errors;
    ``off``), ``infer_shapes``, ``memory_limit_bytes`` (cap on any one value and on the planned
    peak: :class:`~epoxy.errors.ResourceLimitError`), ``max_loop_iterations``, ``check_outputs``
    (every kernel's and compiled group's outputs are checked against the inferred dtype, rank
    and known dims: :class:`~epoxy.errors.OutputTypeError`; also ``EPOXY_CHECK_OUTPUTS=1``),
    ``run_timeout_s`` (config entry ``epoxy.run_timeout_s``: every run stops with
    :class:`~epoxy.errors.RunTerminatedError` once it has run that many seconds, checked
    between steps and at every control-flow iteration; a run's own ``epoxy.run_timeout_s``
    run config entry replaces it; default None, no time bound, as in onnxruntime),
    ``shape_cache`` (config entry ``epoxy.shape_cache``; default True: in sequential mode, the
    steps whose results follow from the input shapes alone, such as exporters' Shape/Gather/
    Concat chains, are skipped on input shapes seen twice before, their earlier results reused;
    see ``epoxy.run.shape_cache``), ``provider_selection_policy`` (config entry
    ``epoxy.provider_selection_policy``; onnxruntime's ``set_provider_selection_policy``: a
    session given no ``providers`` lets this policy choose them, docs/DEVICES.md) and
    ``tune_budget_s`` (``epoxy.tune_budget_s``, default 30: the time ``max_performance`` may
    measure a model for). onnxruntime's EPContext entries: ``ep.context_enable`` =
    ``1`` writes the session's compiled model (``epoxy compile``'s output, docs/AOT.md) to
    ``ep.context_file_path`` (default: the model's path with ``_ctx.onnx``), blobs embedded unless
    ``ep.context_embed_mode`` is ``0`` (then side files beside it). ``session_cache_dir``
    (``epoxy.session_cache_dir``, else ``$EPOXY_SESSION_CACHE_DIR``; default off): a folder where
    the prepared model is kept, so later sessions of the same model and options skip checking,
    shape inference, optimizing and provider compilation (:mod:`epoxy.aot.session_cache`).
    """

    # The attributes' types, for type checkers only (no class attributes): ``__init__`` sets
    # them with ``object.__setattr__``; ``__setattr__`` checks every later assignment.
    graph_optimization_level: GraphOptimizationLevel
    execution_mode: ExecutionMode
    execution_order: ExecutionOrder
    intra_op_num_threads: int
    inter_op_num_threads: int
    enable_profiling: bool
    profile_file_prefix: str
    optimized_model_filepath: str
    log_severity_level: int
    log_verbosity_level: int
    logid: str
    enable_cpu_mem_arena: bool
    enable_mem_pattern: bool
    enable_mem_reuse: bool
    use_deterministic_compute: bool
    use_per_session_threads: bool
    disable_fallback: bool
    check_model: str
    infer_shapes: bool
    memory_limit_bytes: int | None
    max_loop_iterations: int | None
    check_outputs: bool
    run_timeout_s: float | None
    shape_cache: bool
    provider_selection_policy: str | None
    tune_budget_s: float
    context_enable: bool
    context_file_path: str
    context_embed_mode: bool
    session_cache_dir: str
    _config: dict[str, str]
    _dim_overrides: dict[str, dict[str, int]]
    _initializers: dict[str, Any]
    _providers: list[tuple[str, dict[str, Any]]]
    _policy_delegate: Callable[..., Any] | None

    def __init__(self, **fields: Any) -> None:
        object.__setattr__(self, "_config", {})
        object.__setattr__(self, "_dim_overrides", {"name": {}, "denotation": {}})
        object.__setattr__(self, "_initializers", {})
        object.__setattr__(self, "_providers", [])
        object.__setattr__(self, "_policy_delegate", None)
        for name, (default, _) in _FIELDS.items():
            object.__setattr__(self, name, default)
        for name, value in fields.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        spec = _FIELDS.get(name)
        if spec is None:
            raise AttributeError(
                f"SessionOptions has no attribute {name!r}; known attributes: {sorted(_FIELDS)}")
        normalize = spec[1]
        value = normalize(name, value)
        reason = getattr(normalize, "reason", None)
        if reason is not None and value != spec[0]:
            warnings.warn(f"SessionOptions.{name}={value!r} has no effect in epoxy: {reason}", RuntimeWarning,
                          stacklevel=2)
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        changed = ", ".join(f"{n}={getattr(self, n)!r}" for n, (d, _) in _FIELDS.items() if getattr(self, n) != d)
        return f"SessionOptions({changed})"

    def field_values(self) -> dict[str, Any]:
        """Every attribute's current value, in ``repr``'s order (the session cache keys on them)."""
        return {name: getattr(self, name) for name in _FIELDS}

    # -- derived views the session reads ---------------------------------------------------
    @property
    def optimization_level(self) -> str:
        """epoxy's pass level for ``graph_optimization_level``."""
        return self.graph_optimization_level.epoxy_level

    @property
    def parallel(self) -> bool:
        return self.execution_mode == ExecutionMode.ORT_PARALLEL

    @property
    def plans_buffers(self) -> bool:
        """Whether outputs get planned, reused buffers (onnxruntime's arena / mem pattern)."""
        return self.enable_cpu_mem_arena and self.enable_mem_pattern and self.enable_mem_reuse

    def validate(self) -> None:
        """Kept for callers of earlier versions: attributes are checked when they are set."""

    # -- config entries ----------------------------------------------------------------------
    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a string config entry. Keys epoxy knows take effect now (see
        ``known_config_keys()``); any other key is kept, returned by
        ``get_session_config_entry`` and listed by the session as unused."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError("config entries are str key -> str value")
        fixed = _CONFIG_FIXED.get(key)
        if fixed is not None and value.strip().upper() != fixed[0]:
            raise InvalidArgumentError(f"config entry {key}={value!r} is not offered: {fixed[1]}")
        known = _CONFIG_KEYS.get(key)
        if known is not None:
            attribute, parse = known
            try:
                parsed = parse(value)
            except ValueError as exc:
                raise InvalidArgumentError(f"config entry {key}={value!r}: {exc}") from exc
            setattr(self, attribute, parsed)
        self._config[key] = value

    def add_provider(self, provider_name: str, provider_options: dict[str, Any] | None = None) -> None:
        """onnxruntime's ``add_provider``: a provider (epoxy name or onnxruntime alias) with its
        options, used in this order when a session (or :class:`epoxy.ModelCompiler`) is given
        no ``providers`` list; an explicit ``providers=[...]`` replaces them."""
        if not isinstance(provider_name, str) or not provider_name:
            raise InvalidArgumentError(f"add_provider: provider_name must be a non-empty str, got {provider_name!r}")
        if provider_options is not None and not isinstance(provider_options, dict):
            raise InvalidArgumentError("add_provider: provider_options must be a dict of option -> value")
        if any(name == provider_name for name, _ in self._providers):
            raise InvalidArgumentError(f"add_provider: {provider_name!r} was added already")
        self._providers.append((provider_name, dict(provider_options or {})))

    def add_provider_for_devices(self, ep_devices: Sequence[Any], provider_options: Mapping[str, Any]) -> None:
        """onnxruntime's ``add_provider_for_devices``: the provider of these
        :class:`epoxy.devices.EpDevice` objects (from ``epoxy.get_ep_devices()``), on that
        device. All must be one provider's; epoxy drives one device per provider per session."""
        devices = list(ep_devices)
        if not devices or not all(hasattr(d, "ep_name") and hasattr(d, "device_index") for d in devices):
            raise InvalidArgumentError("add_provider_for_devices takes a non-empty list of the EpDevice objects "
                                       "epoxy.get_ep_devices() returns")
        names = sorted({d.ep_name for d in devices})
        if len(names) != 1:
            raise InvalidArgumentError(f"add_provider_for_devices: the devices must be one provider's, got {names}")
        if len(devices) > 1:
            raise InvalidArgumentError(f"add_provider_for_devices: {len(devices)} devices of {names[0]!r}; an epoxy "
                                       "session drives one device per provider (pick one)")
        if not isinstance(provider_options, Mapping):
            raise InvalidArgumentError("add_provider_for_devices: provider_options must be a dict of option -> value")
        self.add_provider(names[0], {**dict(provider_options), "device_index": devices[0].device_index})

    def set_provider_selection_policy(self, policy: Any) -> None:
        """onnxruntime's ``set_provider_selection_policy``: sessions given no ``providers``
        choose them with this policy (``epoxy.OrtExecutionProviderDevicePolicy`` or onnxruntime's
        member, or a name: ``prefer_gpu``, ``max_performance``...; see ``epoxy devices``)."""
        self.provider_selection_policy = policy

    def set_provider_selection_policy_delegate(self, delegate: Callable[..., Any]) -> None:
        """onnxruntime's ``set_provider_selection_policy_delegate``: ``delegate(ep_devices,
        model_metadata, runtime_metadata, max_selections)`` returns the chosen ep devices."""
        if not callable(delegate):
            raise InvalidArgumentError(f"the selection delegate must be callable, got {type(delegate).__name__}")
        object.__setattr__(self, "_policy_delegate", delegate)

    def selection_policy(self) -> Any:
        """The delegate if one is set, else the policy name, else ``None``."""
        return self._policy_delegate or self.provider_selection_policy

    def has_providers(self) -> bool:
        """True once :meth:`add_provider` was called."""
        return bool(self._providers)

    def added_providers(self) -> list[tuple[str, dict[str, Any]]]:
        """The ``(name, options)`` pairs :meth:`add_provider` added, in order."""
        return [(name, dict(options)) for name, options in self._providers]

    def get_session_config_entry(self, key: str) -> str:
        """The value set for ``key``; an unset key is an error, as in onnxruntime."""
        if key not in self._config:
            raise InvalidArgumentError(f"session config entry {key!r} is not set; set: {sorted(self._config)}")
        return self._config[key]

    @staticmethod
    def known_config_keys() -> list[str]:
        """Config keys that change what epoxy does."""
        return sorted([*_CONFIG_KEYS, *_CONFIG_FIXED])

    def unused_config_keys(self) -> list[str]:
        """Config keys set here that epoxy does not use (the session warns about them)."""
        return sorted(k for k in self._config if k not in _CONFIG_KEYS and k not in _CONFIG_FIXED)

    # -- model edits applied at load -----------------------------------------------------------
    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Give the symbolic dimension ``dim_name`` of the graph inputs a fixed size."""
        self._dim_overrides["name"][_text("dim_name", dim_name)] = _dim_value(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Give every input dimension with this denotation (e.g. ``DATA_BATCH``) a fixed size."""
        self._dim_overrides["denotation"][_text("dim_denotation", dim_denotation)] = _dim_value(dim_value)

    @property
    def free_dimension_overrides(self) -> dict[str, dict[str, int]]:
        return {kind: dict(values) for kind, values in self._dim_overrides.items()}

    def add_initializer(self, name: str, value: Any) -> None:
        """Replace the model's initializer ``name`` with ``value`` (an ``OrtValue`` or numpy
        array of the same dtype and shape) when a session loads the model."""
        self._initializers[_text("name", name)] = value

    def add_external_initializers(self, names: list[str], values: list[Any]) -> None:
        """Several :meth:`add_initializer` calls (onnxruntime's external-data override)."""
        if len(names) != len(values):
            raise InvalidArgumentError(f"add_external_initializers: {len(names)} names but {len(values)} values")
        for name, value in zip(names, values):
            self.add_initializer(name, value)

    @property
    def initializer_overrides(self) -> dict[str, Any]:
        return dict(self._initializers)

    def register_custom_ops_library(self, library_path: str) -> None:
        """Not offered: epoxy does not load onnxruntime custom-op shared libraries."""
        raise InvalidArgumentError(
            f"register_custom_ops_library({library_path!r}) is not offered: epoxy cannot load onnxruntime "
            "custom-op libraries (they are C++ against onnxruntime's ABI). Implement the op as a kernel in an "
            "epoxy provider package (docs/PROVIDER_GUIDE.md), or as a model-local ONNX function")


def _dim_value(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"dim_value must be an int >= 0, got {value!r}")
    return value


class RunOptions:
    """Options for one ``run`` (onnxruntime's ``RunOptions``).

    ``terminate = True`` (from any thread) stops runs using these options at the next step
    with :class:`~epoxy.errors.RunTerminatedError`; the session stays usable. Set it back to
    False to reuse the options. ``log_severity_level``, ``log_verbosity_level``, ``logid``,
    ``run_tag`` label the run in epoxy's log. ``add_run_config_entry`` keys epoxy knows:
    ``epoxy.output_device`` (where outputs are returned, as the dict option
    ``{"output_device": ...}``) and ``epoxy.run_timeout_s`` (a positive number of seconds,
    also the attribute ``run_timeout_s``: the run stops with
    :class:`~epoxy.errors.RunTerminatedError` once it has run that long, checked between
    steps and at every control-flow iteration; it replaces the session's
    ``SessionOptions.run_timeout_s``); other keys are kept and warned about at ``run``.
    """

    # The attributes' types, for type checkers only (no class attributes): ``__init__`` sets
    # them with ``object.__setattr__``; ``__setattr__`` checks every later assignment.
    log_severity_level: int
    log_verbosity_level: int
    logid: str
    run_tag: str
    only_execute_path_to_fetches: bool
    _config: dict[str, str]
    _stop: threading.Event
    _output_device: dict[str, str] | None

    _KNOWN_CONFIG = frozenset({"epoxy.output_device", TIMEOUT_KEY})
    _ATTRS = ("terminate", "log_severity_level", "log_verbosity_level", "logid", "run_tag",
              "only_execute_path_to_fetches")

    def __init__(self) -> None:
        object.__setattr__(self, "_config", {})
        object.__setattr__(self, "_stop", threading.Event())
        object.__setattr__(self, "log_severity_level", -1)
        object.__setattr__(self, "log_verbosity_level", 0)
        object.__setattr__(self, "logid", "")
        object.__setattr__(self, "run_tag", "")
        object.__setattr__(self, "only_execute_path_to_fetches", False)
        object.__setattr__(self, "_output_device", None)

    @property
    def terminate(self) -> bool:
        return self._stop.is_set()

    @terminate.setter
    def terminate(self, value: bool) -> None:
        if _flag("terminate", value):
            self._stop.set()
        else:
            self._stop.clear()

    @property
    def run_timeout_s(self) -> float | None:
        """This run's time bound in seconds (the run config entry ``epoxy.run_timeout_s``);
        ``None``: the session's ``run_timeout_s`` applies."""
        return timeout_seconds(TIMEOUT_KEY, self._config.get(TIMEOUT_KEY))

    @run_timeout_s.setter
    def run_timeout_s(self, value: float | None) -> None:
        seconds = timeout_seconds("run_timeout_s", value)
        if seconds is None:
            self._config.pop(TIMEOUT_KEY, None)
        else:
            self._config[TIMEOUT_KEY] = repr(seconds)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("terminate", "run_timeout_s"):
            object.__setattr__(self, name, value)  # the properties
            return
        checks = {"log_severity_level": _severity, "log_verbosity_level": _count, "logid": _text,
                  "run_tag": _text, "only_execute_path_to_fetches": _flag}
        check = checks.get(name)
        if check is None:
            raise AttributeError(f"RunOptions has no attribute {name!r}; known attributes: "
                                 f"{sorted([*self._ATTRS, 'run_timeout_s'])}")
        value = check(name, value)
        if name == "only_execute_path_to_fetches" and value:
            warnings.warn("RunOptions.only_execute_path_to_fetches has no effect in epoxy: every planned step runs "
                          "(results are the same; request fewer outputs from a model cut to them instead)",
                          RuntimeWarning, stacklevel=2)
        object.__setattr__(self, name, value)

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Set a string run config entry; ``epoxy.run_timeout_s`` is checked now."""
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError("run config entries are str key -> str value")
        if key == TIMEOUT_KEY:
            timeout_seconds(f"run config entry {TIMEOUT_KEY}", value)
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgumentError(f"run config entry {key!r} is not set; set: {sorted(self._config)}")
        return self._config[key]

    def unused_config_keys(self) -> list[str]:
        return sorted(k for k in self._config if k not in self._KNOWN_CONFIG)

    def as_dict(self) -> dict[str, Any]:
        """The dict run options epoxy's ``run`` takes (``output_device``)."""
        device = self._output_device or self._config.get("epoxy.output_device")
        return {"output_device": device} if device else {}

    def with_output_devices(self, devices: Mapping[str, str]) -> RunOptions:
        """These options with outputs fetched on the given devices ({output: device}), for
        bindings; the copy shares this object's ``terminate`` flag (setting it stops both)."""
        derived = RunOptions()
        for name in self._ATTRS[1:]:
            object.__setattr__(derived, name, getattr(self, name))
        object.__setattr__(derived, "_config", self._config)
        object.__setattr__(derived, "_stop", self._stop)
        object.__setattr__(derived, "_output_device", dict(devices))
        return derived
