"""Provider options: validated once at ``create`` by :data:`TABLE`, turned into OpenVINO
compile properties."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epoxy.kit.options import Option, OptionTable

from .work_size import ONE_THREAD_BELOW_MACS

HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
#: ``precision`` values, and other spellings: ``default`` (None) lets the device choose
PRECISIONS = ("f32", "f16", "bf16")
PRECISION_ALIASES = {"fp32": "f32", "fp16": "f16", "default": None}
DEFAULT_MIN_GROUP_COST = 30.0
ENV_MIN_GROUP_COST = "EPOXY_OPENVINO_MIN_GROUP_COST"


@dataclass(frozen=True)
class OpenVINOOptions:
    """Validated options; :data:`OPTIONS` says what each one means."""

    device: str | None = None
    performance_hint: str = "LATENCY"
    num_threads: int = 0
    num_streams: int | None = None
    precision: str | None = "f32"
    cache_dir: str | None = None
    min_group_cost: float = DEFAULT_MIN_GROUP_COST
    float16: bool = False
    specialize_shapes: bool = True
    one_thread_below_macs: float = ONE_THREAD_BELOW_MACS
    max_shape_specializations: int = 8
    dynamic_quantization_group_size: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def compile_config(self) -> dict[str, Any]:
        """Properties for ``Core.compile_model``."""
        cfg: dict[str, Any] = {"PERFORMANCE_HINT": self.performance_hint}
        if self.num_threads:
            cfg["INFERENCE_NUM_THREADS"] = self.num_threads
        if self.num_streams is not None:
            cfg["NUM_STREAMS"] = self.num_streams
        elif self.performance_hint == "LATENCY":
            cfg["NUM_STREAMS"] = 1
        if self.precision is not None:
            cfg["INFERENCE_PRECISION_HINT"] = self.precision
        if self.cache_dir:
            cfg["CACHE_DIR"] = self.cache_dir
        if self.dynamic_quantization_group_size is not None:
            cfg["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = self.dynamic_quantization_group_size
        cfg.update(self.config)
        return cfg


_D = OpenVINOOptions()
#: The one table of options: ``create`` parses with it and ``OpenVINOProviderFactory.options()``
#: returns ``TABLE.describe()`` (``epoxy providers``), so the two never disagree.
TABLE: OptionTable[OpenVINOOptions] = OptionTable(
    "openvino",
    [
        Option(
            "device",
            "str",
            _D.device,
            "OpenVINO device (CPU, GPU.1, NPU, AUTO, HETERO:GPU,CPU...)",
            default_text="the epoxy device chosen by device_index",
        ),
        Option("performance_hint", "enum", _D.performance_hint, "PERFORMANCE_HINT", choices=HINTS),
        Option("num_threads", "int", _D.num_threads, "INFERENCE_NUM_THREADS", minimum=0, notes="0: OpenVINO decides"),
        Option(
            "num_streams",
            "int",
            _D.num_streams,
            "NUM_STREAMS",
            minimum=0,
            default_text="1 with the LATENCY hint, else OpenVINO's choice",
        ),
        Option(
            "precision",
            "enum",
            _D.precision,
            "INFERENCE_PRECISION_HINT",
            choices=PRECISIONS,
            aliases=PRECISION_ALIASES,
            notes="f32 gives exact results on every CPU; 'default' = what the device prefers",
        ),
        Option(
            "cache_dir",
            "path",
            _D.cache_dir,
            "CACHE_DIR: directory where compiled blobs are stored and loaded by later sessions",
            convert=os.fspath,
        ),
        Option(
            "min_group_cost",
            "float",
            _D.min_group_cost,
            "estimated cpu microseconds a group must save to be worth one OpenVINO call",
            minimum=0,
            env=ENV_MIN_GROUP_COST,
            notes="0 claims every group",
        ),
        Option(
            "float16",
            "bool",
            _D.float16,
            "also run float16 tensors, computed in float32 and rounded once "
            "(may differ from ONNX's float16 steps by 1 ulp)",
        ),
        Option(
            "specialize_shapes",
            "bool",
            _D.specialize_shapes,
            "a group with dynamic input dims also compiles a static specialization, in the background, "
            "for input shapes it has run twice; later runs of those shapes use it",
        ),
        Option(
            "one_thread_below_macs",
            "float",
            _D.one_thread_below_macs,
            "a group (per static input shapes) whose matrix ops do fewer multiply-adds than this compiles "
            "with INFERENCE_NUM_THREADS 1 on the CPU plugin: waking more threads costs a tiny graph more "
            "than they save; stats(session) says which groups did",
            minimum=0,
            notes="0 keeps num_threads for every group",
        ),
        Option(
            "max_shape_specializations",
            "int",
            _D.max_shape_specializations,
            "static specializations kept per group (least recently used evicted)",
            minimum=0,
            notes="0 turns specializing off",
        ),
        Option(
            "dynamic_quantization_group_size",
            "int",
            _D.dynamic_quantization_group_size,
            "DYNAMIC_QUANTIZATION_GROUP_SIZE: the CPU plugin quantizes the activations feeding int8/int4 "
            "weights (a weight-only QDQ MatMul, MatMulNBits) to int8 at run time, in groups of this many "
            "values, and runs the matmul on integer kernels: faster, less exact",
            minimum=0,
            default_text="0 (off) at precision f32, so results stay float-exact; else OpenVINO's choice",
            notes="32 is OpenVINO's default; MatMulNBits is then left to the cpu provider at f32",
        ),
        Option(
            "config",
            "dict",
            _D.config,
            'extra OpenVINO properties passed as they are, e.g. {"ENABLE_CPU_PINNING": False}',
        ),
    ],
    OpenVINOOptions,
)
#: option name -> one-line help (what ``OpenVINOProviderFactory.options()`` returns)
OPTIONS: dict[str, str] = TABLE.describe()
KNOWN_OPTIONS = TABLE.names
#: ``parse_options(options) -> OpenVINOOptions``; unknown names or bad values raise ``InvalidArgumentError``
parse_options = TABLE.parse
