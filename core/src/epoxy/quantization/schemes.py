"""The quantization modes ``epoxy quantize --mode`` offers: a registry, name -> scheme.

A scheme is a callable ``(model, stats, options) -> (model, notes)``: it gets the float
model, the calibration statistics (None for schemes that need none) and the
:class:`SchemeOptions`, and returns the rewritten model and per-node notes for the report.
``static``, ``fp16`` and ``bf16`` are built in; ``dynamic`` and ``weight-int8``/``weight-int4``
are registered when their modules (``epoxy.quantization.dynamic`` / ``weight_only``) import,
so the tool works with whatever is installed and a missing piece is named, not a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

import onnx

from epoxy.quantization.stats import CalibrationStats

SchemeResult = tuple[onnx.ModelProto, list[str]]


@dataclass(frozen=True)
class SchemeOptions:
    """What the user (or the target defaults) chose; each scheme reads what applies to it."""

    method: str = "minmax"
    per_channel: bool = True
    activation_dtype: str = "uint8"
    weight_dtype: str = "int8"
    reduce_range: bool = False
    op_types: tuple[str, ...] | None = None  # None: the scheme's own default
    nodes_to_exclude: tuple[str, ...] = ()
    providers: tuple[str, ...] = ("cpu",)
    block_size: int | None = None  # weight-only: None is one scale per output channel
    format: str | None = None  # static (default qdq) / dynamic (default qoperator): "qdq" or "qoperator"
    extra: dict[str, Any] = field(default_factory=dict)


Scheme = Callable[[onnx.ModelProto, "CalibrationStats | None", SchemeOptions], SchemeResult]


@dataclass(frozen=True)
class SchemeInfo:
    """One registered mode: its callable, whether it needs calibration data, one line of help."""

    name: str
    run: Scheme
    needs_calibration: bool
    help: str


SCHEMES: dict[str, SchemeInfo] = {}

#: modes registered on first use when their module imports: mode -> (module, registering function)
_LAZY: dict[str, str] = {"dynamic": "dynamic", "weight-int8": "weight_only", "weight-int4": "weight_only"}


def register(name: str, run: Scheme, *, needs_calibration: bool, help: str) -> None:
    """Add (or replace) a mode; replacing is how tests inject a broken scheme."""
    SCHEMES[name] = SchemeInfo(name, run, needs_calibration, help)


def _static(model: onnx.ModelProto, stats: CalibrationStats | None, o: SchemeOptions) -> SchemeResult:
    from epoxy.quantization.qdq import quantize_static

    if stats is None:
        raise ValueError("static quantization needs calibration statistics")
    out = quantize_static(model, stats, method=o.method, activation_dtype=o.activation_dtype,  # type: ignore[arg-type]
                          weight_dtype=o.weight_dtype, per_channel=o.per_channel,  # type: ignore[arg-type]
                          reduce_range=o.reduce_range, op_types=o.op_types or None,
                          nodes_to_exclude=o.nodes_to_exclude, providers=o.providers, format=o.format or "qdq")
    return out, _subgraphs_kept_float(out)  # labels as the written model has them


def _subgraphs_kept_float(model: onnx.ModelProto) -> list[str]:
    """One note per If branch / Loop or Scan body: static calibration sees the model's
    graph only (a body's values change per iteration and are no graph output), so a
    body's nodes stay float; the weight-side schemes quantize them."""
    from epoxy.quantization.matmul_weights import graph_scopes

    notes = []
    for scope in graph_scopes(model)[1:]:
        if scope.labels:
            notes.append(f"{scope.where}: its {len(scope.labels)} node(s) kept float (static calibration does not "
                         "reach If/Loop/Scan bodies; --mode dynamic, weight-int8 or weight-int4 quantize their "
                         "MatMul/Gemm weights)")
    return notes


def _float(dtype: str) -> Scheme:
    def run(model: onnx.ModelProto, stats: CalibrationStats | None, o: SchemeOptions) -> SchemeResult:
        from epoxy.quantization.float16 import convert_float_report

        out, report = convert_float_report(model, dtype=dtype, keep_io_types=True,
                                           node_block_list=list(o.nodes_to_exclude))
        notes = [f"{node}: kept float32 ({why})" for node, why in report.kept_float32]
        notes += list(report.notes)
        notes += [f"{name}: {n} values clipped to the {dtype} range" for name, n in report.clipped.items()]
        return out, notes
    return run


def _call(module_name: str, function: str, model: onnx.ModelProto, **kwargs: Any) -> SchemeResult:
    """``function_report`` when the module has it (its kept-float reasons become notes),
    else ``function``, which returns the model alone."""
    module = import_module(f"epoxy.quantization.{module_name}")
    with_report = getattr(module, f"{function}_report", None)
    if with_report is None:
        return getattr(module, function)(model, **kwargs), []
    out, report = with_report(model, **kwargs)
    return out, [f"{node}: kept float ({why})" for node, why in getattr(report, "kept_float", ())]


def _dynamic(model: onnx.ModelProto, stats: CalibrationStats | None, o: SchemeOptions) -> SchemeResult:
    kwargs: dict[str, Any] = {"weight_dtype": o.weight_dtype, "per_channel": o.per_channel,
                              "reduce_range": o.reduce_range, "nodes_to_exclude": o.nodes_to_exclude}
    if o.op_types:
        kwargs["op_types"] = o.op_types
    if o.format:
        kwargs["format"] = o.format
    return _call("dynamic", "quantize_dynamic", model, **kwargs)


def _weights(dtype: str) -> Scheme:
    def run(model: onnx.ModelProto, stats: CalibrationStats | None, o: SchemeOptions) -> SchemeResult:
        kwargs: dict[str, Any] = {"dtype": dtype, "block_size": o.block_size, "nodes_to_exclude": o.nodes_to_exclude}
        if o.op_types:
            kwargs["op_types"] = o.op_types
        return _call("weight_only", "quantize_weights", model, **kwargs)
    return run


_LAZY_SCHEMES: dict[str, tuple[Scheme, bool, str]] = {
    "dynamic": (_dynamic, False, "int8 weights, activations quantized at run time (MatMul/Gemm-heavy models)"),
    "weight-int8": (_weights("int8"), False, "int8 weights only (blocked DequantizeLinear), float compute"),
    "weight-int4": (_weights("int4"), False, "int4 weights only (blocked DequantizeLinear, opset 21), float compute"),
}

register("static", _static, needs_calibration=True,
         help="QDQ int8 from calibration data: activations and weights (CNNs, any provider)")
register("fp16", _float("float16"), needs_calibration=False, help="float16 weights and compute, float32 I/O")
register("bf16", _float("bfloat16"), needs_calibration=False, help="bfloat16 weights and compute, float32 I/O")


def _load_lazy(name: str) -> bool:
    if name in SCHEMES:
        return True
    if name not in _LAZY:
        return False
    try:
        import_module(f"epoxy.quantization.{_LAZY[name]}")
    except ImportError:
        return False
    run, needs, text = _LAZY_SCHEMES[name]
    register(name, run, needs_calibration=needs, help=text)
    return True


def available() -> dict[str, SchemeInfo]:
    """Every mode usable now, the lazily registered ones included when they import."""
    for name in _LAZY:
        _load_lazy(name)
    return dict(SCHEMES)


def get(name: str) -> SchemeInfo:
    """The mode ``name``; a :class:`KeyError` subclass naming what exists otherwise."""
    from epoxy.errors import InvalidArgumentError

    if _load_lazy(name):
        return SCHEMES[name]
    why = f" (needs epoxy.quantization.{_LAZY[name]}, not installed)" if name in _LAZY else ""
    raise InvalidArgumentError(f"unknown or unavailable quantization mode {name!r}{why}; available: "
                               f"{', '.join(available())}")


ALL_MODES = ("static", "dynamic", "fp16", "bf16", "weight-int8", "weight-int4")


# -- defaults by target ----------------------------------------------------------------------

_VNNI = ("avx512_vnni", "avxvnni", "amx_int8")


def vnni(features: frozenset[str]) -> str | None:
    """The first u8*s8 dot-product feature of ``features`` (AVX512-VNNI, AVX-VNNI, AMX-INT8), or None."""
    return next((f for f in _VNNI if f in features), None)


def cpu_features() -> frozenset[str]:
    """This CPU's feature flags, lower case (``/proc/cpuinfo``'s spelling: ``avx512_vnni``),
    from /proc/cpuinfo where it exists, else from numpy's dispatch table."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as numpy_features  # type: ignore[import-not-found]
    except ImportError:  # numpy < 2
        return frozenset()
    spelled = {"AVX512VNNI": "avx512_vnni", "AVXVNNI": "avxvnni", "AVX512F": "avx512f", "AVX2": "avx2",
               "AVX512FP16": "avx512_fp16", "AVX512BF16": "avx512_bf16"}
    return frozenset(spelled.get(k, k.lower()) for k, on in numpy_features.items() if on)


@dataclass(frozen=True)
class TargetDefaults:
    """Integer precision for the target, and the one line saying why."""

    activation_dtype: str
    weight_dtype: str
    per_channel: bool
    reduce_range: bool
    why: str

    def line(self) -> str:
        return (f"activation {self.activation_dtype} / weight {self.weight_dtype}, "
                f"{'per-channel' if self.per_channel else 'per-tensor'}, "
                f"reduce_range {'on' if self.reduce_range else 'off'}: {self.why}")


def target_defaults(providers: tuple[str, ...], features: frozenset[str]) -> TargetDefaults:
    """u8s8 where integer dot products take unsigned x signed bytes (x86); reduce_range where
    AVX2's vpmaddubsw adds two u8*s8 products into int16 and saturates (no VNNI); s8s8
    elsewhere (ARM's sdot, and runtimes without a u8s8 path)."""
    dot = vnni(features)
    if providers and providers[0] == "openvino":
        return TargetDefaults("uint8", "int8", True, False,
                              "OpenVINO runs QDQ u8 activations with symmetric s8 weights per channel")
    if dot:
        name = {"avx512_vnni": "AVX512-VNNI", "avxvnni": "AVX-VNNI", "amx_int8": "AMX-INT8"}[dot]
        return TargetDefaults("uint8", "int8", True, False, f"this CPU has {name}")
    if "avx2" in features or "avx512f" in features:
        return TargetDefaults("uint8", "int8", True, True,
                              "no VNNI on this CPU: u8*s8 pairs sum into int16 and saturate, so weights use 7 bits")
    return TargetDefaults("int8", "int8", True, False, "no x86 u8s8 dot product here: signed activations")


def float_candidates(providers: tuple[str, ...], features: frozenset[str]) -> list[str]:
    """Float modes worth trying for ``--mode auto``: only where the target computes them
    natively (OpenVINO on a CPU with fp16/bf16 units); ep-cpu upcasts, which only costs."""
    if not providers or providers[0] != "openvino":
        return []
    out = []
    if "avx512_fp16" in features or "amx_fp16" in features:
        out.append("fp16")
    if "avx512_bf16" in features or "amx_bf16" in features:
        out.append("bf16")
    return out
